//! Listing a cluster's keys: `SCAN` on every master, each from a cursor of
//! its own (a cursor means nothing to another node).

use redis::Value;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo, SingleNodeRoutingInfo};

use super::redis::{SCAN_COUNT, backend_error};
use crate::LockError;
use crate::error::{BackendError, BackendErrorKind};

/// Every key matching `pattern` on every master of the cluster behind
/// `conn` (`name` in errors).
pub(super) async fn scan_masters(
    conn: &ClusterConnection,
    name: &str,
    pattern: &str,
) -> Result<Vec<String>, LockError> {
    let what = format!("scan `{pattern}`");
    let failed = |err| LockError::from(backend_error(name, &what, err));
    let mut conn = conn.clone();
    // A command to all masters answers with each master's address.
    let everyone = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
    let answers = conn
        .route_command(redis::cmd("PING"), everyone)
        .await
        .map_err(failed)?;
    let Value::Map(answers) = answers else {
        return Err(unexpected(name, &what, &answers));
    };
    let mut keys = Vec::new();
    for (address, _) in answers {
        let address: String = redis::from_redis_value(address.clone())
            .map_err(|_| unexpected(name, &what, &address))?;
        let node = address
            .rsplit_once(':')
            .and_then(|(host, port)| Some((host.to_owned(), port.parse().ok()?)));
        let Some((host, port)) = node else {
            return Err(unexpected(name, &what, &Value::SimpleString(address)));
        };
        let routing = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress { host, port });
        let mut cursor = 0_u64;
        loop {
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(pattern)
                .arg("COUNT")
                .arg(SCAN_COUNT);
            let reply = conn
                .route_command(scan, routing.clone())
                .await
                .map_err(failed)?;
            let (next, batch): (u64, Vec<String>) = redis::from_redis_value(reply.clone())
                .map_err(|_| unexpected(name, &what, &reply))?;
            keys.extend(batch);
            if next == 0 {
                break;
            }
            cursor = next;
        }
    }
    Ok(keys)
}

fn unexpected(name: &str, what: &str, reply: &Value) -> LockError {
    BackendError::new(
        BackendErrorKind::Protocol,
        format!("{name}: {what}"),
        format!("unexpected reply {reply:?}"),
    )
    .into()
}
