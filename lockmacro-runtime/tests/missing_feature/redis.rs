use lockmacro_runtime::Locker;

fn main() {
    let _locker = Locker::connect("redis://127.0.0.1:6379/");
    let _redlock = Locker::redlock(["redis://10.0.0.1:6379/", "redis://10.0.0.2:6379/"]);
}
