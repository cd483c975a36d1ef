use lockmacro_runtime::Locker;

fn main() {
    let _locker = Locker::cluster(["redis://10.0.0.1:6379/"]);
}
