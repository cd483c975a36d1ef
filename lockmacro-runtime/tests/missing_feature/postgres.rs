use lockmacro_runtime::Locker;

fn main() {
    let _locker = Locker::postgres("postgres://app:secret@10.0.0.5/app");
}
