use lockmacro_runtime::Locker;

fn main() {
    let _locker = Locker::etcd(["http://10.0.0.1:2379"]);
}
