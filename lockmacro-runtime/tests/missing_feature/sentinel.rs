use lockmacro_runtime::Locker;

fn main() {
    let _locker = Locker::sentinel("mymaster", ["redis://10.0.0.1:26379"]);
}
