//! One kind per key: the migration refuses to take a key held as another
//! kind by raising SQLSTATE `LMKND` (see `lockmacro_check_kind`), which
//! becomes [`LockError::WrongKind`] here.

use std::error::Error as _;

use crate::backend::AcquireRequest;
use crate::{KeyKind, LockError};

/// The SQLSTATE of a key held as another kind than the one asked for.
const WRONG_KIND: &str = "LMKND";

/// `err` as [`LockError::WrongKind`] when the server refused `req` for the
/// kind of one of its keys, else unchanged.
pub(super) fn refusal(err: LockError, req: &AcquireRequest<'_>) -> LockError {
    let LockError::Backend(backend) = &err else {
        return err;
    };
    let Some(sqlx::Error::Database(db)) = backend
        .source()
        .and_then(|source| source.downcast_ref::<sqlx::Error>())
    else {
        return err;
    };
    if db.code().as_deref() != Some(WRONG_KIND) {
        return err;
    }
    // The detail is `<index of the key> <kind held>`.
    let detail = db
        .try_downcast_ref::<sqlx::postgres::PgDatabaseError>()
        .and_then(|pg| pg.detail());
    let parsed = detail.and_then(|detail| {
        let (index, held) = detail.split_once(' ')?;
        Some((index.parse::<usize>().ok()?, held.parse::<i64>().ok()?))
    });
    let Some((key, held)) = parsed.and_then(|(index, held)| Some((req.keys.get(index)?, held)))
    else {
        return err;
    };
    LockError::WrongKind {
        key: key.clone(),
        held: kind(held),
        asked: req.kind(),
    }
}

/// A kind as the migration writes it: -1 a lock, 0 a read-write lock, N a
/// semaphore of N permits.
fn kind(code: i64) -> KeyKind {
    match u32::try_from(code) {
        Ok(0) => KeyKind::ReadWrite,
        Ok(permits) => KeyKind::Semaphore { permits },
        Err(_) => KeyKind::Lock,
    }
}

#[cfg(test)]
mod tests {
    use super::kind;
    use crate::KeyKind;

    #[test]
    fn codes_read_as_the_kinds_the_migration_means() {
        assert_eq!(kind(-1), KeyKind::Lock);
        assert_eq!(kind(0), KeyKind::ReadWrite);
        assert_eq!(kind(7), KeyKind::Semaphore { permits: 7 });
    }
}
