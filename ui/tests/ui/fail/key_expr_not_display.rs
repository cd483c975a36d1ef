use lockmacro_runtime::distributed_lock;

pub struct Order {
    pub id: u64,
}

#[distributed_lock(key = order, ttl = "30s")]
async fn ship(order: &Order) {
    let _ = order.id;
}

fn main() {}
