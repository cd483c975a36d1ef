use lockmacro_runtime::distributed_lock;

pub struct State {
    pub name: String,
}

#[distributed_lock(key = "job", ttl = "30s", locker = state.name)]
async fn job(state: &State) {
    let _ = state;
}

fn main() {}
