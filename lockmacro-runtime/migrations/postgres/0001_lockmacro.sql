-- lockmacro's PostgreSQL schema (lockmacro-runtime, feature `postgres`).
--
-- The backend runs this file itself when its tables are missing. Run it
-- yourself (psql, sqlx migrate, refinery, ...) when the backend's user may
-- not create tables, then grant that user SELECT, INSERT, UPDATE and DELETE
-- on the `lockmacro_*` tables, USAGE on the sequence `lockmacro_fence_seq`
-- and EXECUTE on the functions. Running it again changes nothing, and
-- running it over an older version adds what is missing.
--
-- Every expiry is set and compared on the server's clock
-- (`clock_timestamp()`): clients' clocks do not matter, and nothing depends
-- on holding a session, so it works through a pooler in transaction mode.

-- One row per lock key: the owner's token, the value (token, then metadata)
-- and when the lease ends. A row whose lease ended is free.
CREATE TABLE IF NOT EXISTS lockmacro_locks (
    key        text        PRIMARY KEY CHECK (octet_length(key) <= 1024),
    token      text        NOT NULL,
    value      text        NOT NULL,
    expires_at timestamptz NOT NULL
);
-- Whether a waiter listens for this lease's release (added in schema
-- version 6): a release notifies only then, so that a lock nobody waits
-- for costs no notification.
ALTER TABLE lockmacro_locks ADD COLUMN IF NOT EXISTS waited boolean NOT NULL DEFAULT false;

-- Fencing counters, one per fence key: advanced in the transaction that
-- takes the lock, never reset, so tokens never go backwards.
CREATE TABLE IF NOT EXISTS lockmacro_fences (
    key   text   PRIMARY KEY,
    value bigint NOT NULL
);
-- When the last token was minted (added in schema version 7): a row idle
-- long enough is reaped (`lockmacro_sweep`). Tokens come from one sequence
-- (below), so a reaped row never sends them backwards.
ALTER TABLE lockmacro_fences ADD COLUMN IF NOT EXISTS minted_at timestamptz NOT NULL
    DEFAULT now();

-- Fair waiters, in arrival order (`seq`), each until its wait ends.
CREATE TABLE IF NOT EXISTS lockmacro_queue (
    key        text        NOT NULL,
    token      text        NOT NULL,
    seq        bigint      GENERATED ALWAYS AS IDENTITY,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, token)
);
CREATE INDEX IF NOT EXISTS lockmacro_queue_line ON lockmacro_queue (key, seq);

-- Tokens given back while they held nothing: an acquire sent with one of
-- them (cancelled by its caller, its statement still on its way or waiting
-- its turn) must not take the keys after the give-back. Kept a minute.
CREATE TABLE IF NOT EXISTS lockmacro_given_back (
    token      text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);
CREATE INDEX IF NOT EXISTS lockmacro_given_back_expiry ON lockmacro_given_back (expires_at);

-- Shares of a key (added in schema version 2): a semaphore's permits, a
-- read-write lock's reads and its write, one row per holder, each on a
-- lease of its own. A key is held by a lock (`lockmacro_locks`) or by
-- shares of one kind (the same `permits`), never both; a key whose shares
-- have all expired is free for any kind.
CREATE TABLE IF NOT EXISTS lockmacro_shares (
    key        text        NOT NULL CHECK (octet_length(key) <= 1024),
    token      text        NOT NULL,
    -- The semaphore's number of permits; NULL for a read-write lock.
    permits    integer     CHECK (permits > 0),
    held_as    text        NOT NULL CHECK (held_as IN ('permit', 'read', 'write')),
    value      text        NOT NULL,
    expires_at timestamptz NOT NULL,
    PRIMARY KEY (key, token)
);

-- A writer waiting for the readers of a key: readers that come after it
-- wait behind it until `expires_at`, which each of its attempts pushes to
-- a second past the first reader's expiry. A writer that gives up holds
-- readers back no longer than that.
CREATE TABLE IF NOT EXISTS lockmacro_writing (
    key        text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);

-- Milliseconds left in an interval, rounded up, never negative.
CREATE OR REPLACE FUNCTION lockmacro_ms(left_over interval) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT greatest(0, ceil(extract(epoch FROM left_over) * 1000))::bigint
$$;

-- The next fencing token of `fence_key` (NULL: none asked), from the one
-- sequence every key shares (`lockmacro_fence_seq`, below); the row of
-- `fence_key` remembers the last one, for `inspect`. A retry of an acquire
-- that already went through (`retried`) is minted a token too: the row may
-- be shared by several locks, and then holds another holder's token. The
-- first attempt's token was never told, so the holder's tokens only go up.
CREATE OR REPLACE FUNCTION lockmacro_fence(fence_key text, retried boolean) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    minted bigint;
BEGIN
    IF fence_key IS NULL THEN
        RETURN NULL;
    END IF;
    INSERT INTO lockmacro_fences AS f (key, value, minted_at)
        VALUES (fence_key, nextval('lockmacro_fence_seq'), clock_timestamp())
        ON CONFLICT (key) DO UPDATE SET value = excluded.value, minted_at = excluded.minted_at
        RETURNING f.value INTO minted;
    RETURN minted;
END
$$;

-- Serialises the acquires of one key for the rest of the transaction.
CREATE OR REPLACE FUNCTION lockmacro_guard(lock_key text) RETURNS void
LANGUAGE sql AS $$
    SELECT pg_advisory_xact_lock(1819239275, hashtext(lock_key))
$$;

-- Whether the token of `lock_value` was given back (see
-- `lockmacro_given_back`): its acquire is then refused as busy.
-- (PL/pgSQL rather than SQL here and below: PL/pgSQL keeps a statement's
-- plan for the session, where an SQL function called from PL/pgSQL is
-- planned again on every call, most of what an acquire costs.)
CREATE OR REPLACE FUNCTION lockmacro_was_given_back(lock_value text, now_ timestamptz)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    RETURN EXISTS (
        SELECT 1 FROM lockmacro_given_back g
            WHERE g.token = left(lock_value, 32) AND g.expires_at > now_
    );
END
$$;

-- Takes every key of `lock_keys` (sorted) for `ttl_ms`, or none of them.
-- Returns one row: `busy` (the index of a key held by someone else or with
-- fair waiters queued, NULL when taken), the milliseconds left of what
-- holds it, and the fencing token. A busy answer to a caller that listens
-- for releases (`waiting`) marks the lease in its way, whose release then
-- notifies.
CREATE OR REPLACE FUNCTION lockmacro_acquire(
    lock_keys text[], lock_value text, ttl_ms bigint, fence_key text, waiting boolean
) RETURNS TABLE (busy integer, left_ms bigint, fence bigint)
LANGUAGE plpgsql AS $$
DECLARE
    lock_key text;
    now_ timestamptz;
    held record;
    queued timestamptz;
    idx integer := 0;
    ours integer := 0;
BEGIN
    FOREACH lock_key IN ARRAY lock_keys LOOP
        PERFORM lockmacro_guard(lock_key);
    END LOOP;
    now_ := clock_timestamp();
    IF lockmacro_was_given_back(lock_value, now_) THEN
        RETURN QUERY SELECT 0, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    idx := lockmacro_in_transaction(lock_keys);
    IF idx IS NOT NULL THEN
        RETURN QUERY SELECT idx, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    idx := 0;
    FOREACH lock_key IN ARRAY lock_keys LOOP
        PERFORM lockmacro_check_kind(lock_key, idx, -1, now_);
        SELECT l.value, l.expires_at INTO held
            FROM lockmacro_locks l WHERE l.key = lock_key AND l.expires_at > now_;
        IF FOUND THEN
            IF held.value <> lock_value THEN
                IF waiting THEN
                    UPDATE lockmacro_locks l SET waited = true
                        WHERE l.key = lock_key AND NOT l.waited;
                END IF;
                RETURN QUERY SELECT idx, lockmacro_ms(held.expires_at - now_), NULL::bigint;
                RETURN;
            END IF;
            ours := ours + 1;
        ELSE
            -- Fair waiters are served first: an ordinary obtain does not
            -- overtake them.
            SELECT min(q.expires_at) INTO queued
                FROM lockmacro_queue q WHERE q.key = lock_key AND q.expires_at > now_;
            IF queued IS NOT NULL THEN
                RETURN QUERY SELECT idx, lockmacro_ms(queued - now_), NULL::bigint;
                RETURN;
            END IF;
        END IF;
        idx := idx + 1;
    END LOOP;
    INSERT INTO lockmacro_locks AS l (key, token, value, expires_at)
        SELECT k, left(lock_value, 32), lock_value, now_ + ttl_ms * interval '1 millisecond'
        FROM unnest(lock_keys) AS k
        ON CONFLICT (key) DO UPDATE
            SET token = excluded.token, value = excluded.value, expires_at = excluded.expires_at,
                waited = l.waited AND l.expires_at > now_;
    RETURN QUERY SELECT NULL::integer, NULL::bigint,
        lockmacro_fence(fence_key, ours = cardinality(lock_keys));
END
$$;

-- What clients of schema version 5 and older call: they listen whenever
-- they wait, and their releases always notify.
CREATE OR REPLACE FUNCTION lockmacro_acquire(
    lock_keys text[], lock_value text, ttl_ms bigint, fence_key text
) RETURNS TABLE (busy integer, left_ms bigint, fence bigint)
LANGUAGE sql AS $$
    SELECT * FROM lockmacro_acquire(lock_keys, lock_value, ttl_ms, fence_key, true)
$$;

-- Takes one key as a plain lock for `ttl_ms`: the obtain most calls make,
-- and so the cheapest. One insert does the work, its checks those of
-- `lockmacro_acquire` (a live lease of another token, shares, fair
-- waiters, a given-back token, a transaction-scoped lock) in its `WHERE`;
-- only a busy answer looks again to say what is in the way. Returns what
-- `lockmacro_acquire_shared` does.
CREATE OR REPLACE FUNCTION lockmacro_take(
    lock_key text, lock_value text, ttl_ms bigint, fence_key text, waiting boolean
) RETURNS TABLE (busy integer, left_ms bigint, fence bigint, holder text)
LANGUAGE plpgsql AS $$
DECLARE
    now_ timestamptz;
    held record;
    queued timestamptz;
BEGIN
    PERFORM pg_advisory_xact_lock(1819239275, hashtext(lock_key));
    now_ := clock_timestamp();
    INSERT INTO lockmacro_locks AS l (key, token, value, expires_at)
        SELECT lock_key, left(lock_value, 32), lock_value,
            now_ + ttl_ms * interval '1 millisecond'
        WHERE NOT EXISTS (SELECT 1 FROM lockmacro_shares s
                WHERE s.key = lock_key AND s.expires_at > now_)
            AND NOT EXISTS (SELECT 1 FROM lockmacro_queue q
                WHERE q.key = lock_key AND q.expires_at > now_)
            AND NOT EXISTS (SELECT 1 FROM lockmacro_given_back g
                WHERE g.token = left(lock_value, 32) AND g.expires_at > now_)
            AND pg_try_advisory_xact_lock_shared(1819239276, hashtext(lock_key))
        ON CONFLICT (key) DO UPDATE
            SET token = excluded.token, value = excluded.value, expires_at = excluded.expires_at,
                waited = l.waited AND l.expires_at > now_
            WHERE l.expires_at <= now_ OR l.value = excluded.value;
    IF FOUND THEN
        RETURN QUERY SELECT NULL::integer, NULL::bigint, lockmacro_fence(fence_key, false),
            NULL::text;
        RETURN;
    END IF;
    IF lockmacro_was_given_back(lock_value, now_)
        OR lockmacro_in_transaction(ARRAY[lock_key]) IS NOT NULL THEN
        RETURN QUERY SELECT 0, NULL::bigint, NULL::bigint, NULL::text;
        RETURN;
    END IF;
    PERFORM lockmacro_check_kind(lock_key, 0, -1, now_);
    SELECT l.value, l.expires_at, l.waited, substr(l.value, 33) AS metadata INTO held
        FROM lockmacro_locks l WHERE l.key = lock_key AND l.expires_at > now_;
    IF FOUND AND held.value = lock_value THEN
        -- A retry whose first attempt went through, since when fair waiters
        -- may have queued: the key is still this caller's.
        UPDATE lockmacro_locks l SET expires_at = now_ + ttl_ms * interval '1 millisecond'
            WHERE l.key = lock_key;
        RETURN QUERY SELECT NULL::integer, NULL::bigint, lockmacro_fence(fence_key, true),
            NULL::text;
        RETURN;
    END IF;
    IF FOUND THEN
        IF waiting AND NOT held.waited THEN
            UPDATE lockmacro_locks l SET waited = true WHERE l.key = lock_key;
        END IF;
        RETURN QUERY SELECT 0, lockmacro_ms(held.expires_at - now_), NULL::bigint, held.metadata;
        RETURN;
    END IF;
    SELECT min(q.expires_at) INTO queued
        FROM lockmacro_queue q WHERE q.key = lock_key AND q.expires_at > now_;
    RETURN QUERY SELECT 0, lockmacro_ms(queued - now_), NULL::bigint, NULL::text;
END
$$;

-- A fair attempt on one key: takes it when it is free and nobody is queued
-- ahead, else joins its queue (once) for `wait_ms` (0: does not join).
-- Returns what `lockmacro_acquire` does.
CREATE OR REPLACE FUNCTION lockmacro_acquire_fair(
    lock_key text, lock_value text, ttl_ms bigint, wait_ms bigint, fence_key text
) RETURNS TABLE (busy integer, left_ms bigint, fence bigint)
LANGUAGE plpgsql AS $$
DECLARE
    now_ timestamptz;
    waiter text := left(lock_value, 32);
    held record;
    head record;
BEGIN
    PERFORM lockmacro_guard(lock_key);
    now_ := clock_timestamp();
    IF lockmacro_was_given_back(lock_value, now_)
        OR lockmacro_in_transaction(ARRAY[lock_key]) IS NOT NULL THEN
        RETURN QUERY SELECT 0, NULL::bigint, NULL::bigint;
        RETURN;
    END IF;
    PERFORM lockmacro_check_kind(lock_key, 0, -1, now_);
    SELECT l.value, l.expires_at INTO held
        FROM lockmacro_locks l WHERE l.key = lock_key AND l.expires_at > now_;
    IF FOUND AND held.value = lock_value THEN
        UPDATE lockmacro_locks SET expires_at = now_ + ttl_ms * interval '1 millisecond'
            WHERE key = lock_key;
        RETURN QUERY SELECT NULL::integer, NULL::bigint, lockmacro_fence(fence_key, true);
        RETURN;
    END IF;
    DELETE FROM lockmacro_queue q WHERE q.key = lock_key AND q.expires_at <= now_;
    SELECT q.token, q.expires_at INTO head
        FROM lockmacro_queue q WHERE q.key = lock_key ORDER BY q.seq LIMIT 1;
    IF held IS NULL AND (head IS NULL OR head.token = waiter) THEN
        DELETE FROM lockmacro_queue q WHERE q.key = lock_key AND q.token = waiter;
        -- Marked as waited for: the release of a lock taken in turn
        -- wakes whoever came after.
        INSERT INTO lockmacro_locks AS l (key, token, value, expires_at, waited)
            VALUES (lock_key, waiter, lock_value, now_ + ttl_ms * interval '1 millisecond', true)
            ON CONFLICT (key) DO UPDATE
                SET token = excluded.token, value = excluded.value,
                    expires_at = excluded.expires_at, waited = true;
        RETURN QUERY SELECT NULL::integer, NULL::bigint, lockmacro_fence(fence_key, false);
        RETURN;
    END IF;
    IF wait_ms > 0 THEN
        INSERT INTO lockmacro_queue (key, token, expires_at)
            VALUES (lock_key, waiter, now_ + wait_ms * interval '1 millisecond')
            ON CONFLICT (key, token) DO NOTHING;
    END IF;
    IF held IS NOT NULL THEN
        UPDATE lockmacro_locks l SET waited = true WHERE l.key = lock_key AND NOT l.waited;
    END IF;
    RETURN QUERY SELECT 0, lockmacro_ms(coalesce(held.expires_at, head.expires_at) - now_),
        NULL::bigint;
END
$$;

-- Extends many leases at once: lease `leases[i]` owns key `lock_keys[i]`
-- with token `tokens[i]` (the lock, or a share of it) and is extended to
-- `ttls_ms[i]`, if it still holds every one of its keys. Returns the leases
-- extended.
CREATE OR REPLACE FUNCTION lockmacro_refresh(
    lock_keys text[], tokens text[], ttls_ms bigint[], leases integer[]
) RETURNS SETOF integer
LANGUAGE sql AS $$
    WITH wanted AS (
        SELECT * FROM unnest(lock_keys, tokens, ttls_ms, leases) AS w(key, token, ttl_ms, lease)
    ), checked AS (
        SELECT w.lease,
            EXISTS (SELECT 1 FROM lockmacro_locks l
                WHERE l.key = w.key AND l.token = w.token AND l.expires_at > clock_timestamp())
            OR EXISTS (SELECT 1 FROM lockmacro_shares s
                WHERE s.key = w.key AND s.token = w.token AND s.expires_at > clock_timestamp())
            AS live
        FROM wanted w
    ), owned AS (
        SELECT c.lease FROM checked c GROUP BY c.lease HAVING bool_and(c.live)
    ), extended AS (
        UPDATE lockmacro_locks l
            SET expires_at = clock_timestamp() + w.ttl_ms * interval '1 millisecond'
            FROM wanted w JOIN owned o ON o.lease = w.lease
            WHERE l.key = w.key AND l.token = w.token
            RETURNING w.lease
    ), extended_shares AS (
        UPDATE lockmacro_shares s
            SET expires_at = clock_timestamp() + w.ttl_ms * interval '1 millisecond'
            FROM wanted w JOIN owned o ON o.lease = w.lease
            WHERE s.key = w.key AND s.token = w.token
            RETURNING w.lease
    )
    SELECT DISTINCT e.lease FROM (
        SELECT lease FROM extended UNION ALL SELECT lease FROM extended_shares
    ) e
$$;

-- Deletes the keys (or the shares of them) that `token` holds and its
-- places in their queues, and
-- tells the waiters (channel `lockmacro_release`, the key as payload).
-- Waits for acquires of the keys in progress, and when `token` held none
-- of them, remembers it as given back. Returns whether every key was still
-- held by `token`.
CREATE OR REPLACE FUNCTION lockmacro_release(lock_keys text[], owner text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    held integer;
    live integer;
    lock_key text;
BEGIN
    FOREACH lock_key IN ARRAY lock_keys LOOP
        PERFORM lockmacro_guard(lock_key);
    END LOOP;
    WITH gone AS (
        DELETE FROM lockmacro_locks l WHERE l.key = ANY (lock_keys) AND l.token = owner
            RETURNING l.key, l.expires_at > clock_timestamp() AS alive
    ), gone_shares AS (
        DELETE FROM lockmacro_shares s WHERE s.key = ANY (lock_keys) AND s.token = owner
            RETURNING s.key, s.expires_at > clock_timestamp() AS alive
    ), left_line AS (
        DELETE FROM lockmacro_queue q WHERE q.key = ANY (lock_keys) AND q.token = owner
            RETURNING q.key
    ), told AS (
        SELECT pg_notify('lockmacro_release', k.key)
            FROM (SELECT g.key FROM gone g UNION SELECT g.key FROM gone_shares g
                UNION SELECT l.key FROM left_line l) k
    ), leases AS (
        SELECT g.alive FROM gone g UNION ALL SELECT g.alive FROM gone_shares g
    )
    -- `told` is read so that it runs: a CTE that nothing reads does not.
    SELECT count(*), count(*) FILTER (WHERE l.alive) + 0 * (SELECT count(*) FROM told)
        INTO held, live FROM leases l;
    IF held = 0 THEN
        DELETE FROM lockmacro_given_back g WHERE g.expires_at <= clock_timestamp();
        INSERT INTO lockmacro_given_back (token, expires_at)
            VALUES (owner, clock_timestamp() + interval '1 minute')
            ON CONFLICT (token) DO UPDATE SET expires_at = excluded.expires_at;
    END IF;
    RETURN live = cardinality(lock_keys);
END
$$;

-- Releases one key `owner` holds as a lock: a delete by token, and a
-- notification when a waiter listens. Anything else (shares, a place in a
-- queue, a token that holds nothing) goes to `lockmacro_release`, which
-- also waits for an acquire of the key in progress: this delete does not,
-- since a row it finds is committed, and one it misses is looked for
-- again there.
CREATE OR REPLACE FUNCTION lockmacro_give(lock_key text, owner text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    gone record;
BEGIN
    DELETE FROM lockmacro_locks l WHERE l.key = lock_key AND l.token = owner
        RETURNING l.expires_at > clock_timestamp() AS alive, l.waited INTO gone;
    IF NOT FOUND THEN
        RETURN lockmacro_release(ARRAY[lock_key], owner);
    END IF;
    IF gone.waited THEN
        PERFORM pg_notify('lockmacro_release', lock_key);
    END IF;
    RETURN gone.alive;
END
$$;

-- Refuses to take `lock_key` as `asked` (-1 a lock, 0 a read-write lock,
-- N a semaphore of N permits) while live leases hold it as another kind:
-- raises SQLSTATE LMKND with the detail '<idx> <held>' (`idx`: the key's
-- index in the request), which the client turns into
-- `LockError::WrongKind`; the statement then writes nothing.
CREATE OR REPLACE FUNCTION lockmacro_check_kind(
    lock_key text, idx integer, asked integer, now_ timestamptz
) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    held integer;
BEGIN
    IF asked <> -1 AND EXISTS (
        SELECT 1 FROM lockmacro_locks l WHERE l.key = lock_key AND l.expires_at > now_
    ) THEN
        held := -1;
    ELSE
        SELECT coalesce(s.permits, 0) INTO held FROM lockmacro_shares s
            WHERE s.key = lock_key AND s.expires_at > now_ LIMIT 1;
    END IF;
    IF held IS NOT NULL AND held <> asked THEN
        RAISE EXCEPTION USING ERRCODE = 'LMKND',
            MESSAGE = format('%s is held as another kind', lock_key),
            DETAIL = format('%s %s', idx, held);
    END IF;
END
$$;

-- The metadata of the live lock on `lock_key`, for a busy answer. STRICT:
-- an acquire that took its keys asks for the holder of NULL, and is not
-- sent to the table.
CREATE OR REPLACE FUNCTION lockmacro_holder(lock_key text) RETURNS text
LANGUAGE plpgsql STRICT AS $$
BEGIN
    RETURN (SELECT substr(l.value, 33) FROM lockmacro_locks l
        WHERE l.key = lock_key AND l.expires_at > clock_timestamp());
END
$$;

-- Takes a share of `lock_key` for `ttl_ms`: one of `permits` permits, or
-- (`permits` NULL) a read or the write of a read-write lock, as `held_as`
-- says. Shares past their expiry are dropped before counting, so a holder
-- that died gives its share back after its ttl, never sooner.
--
-- A permit is taken while fewer than `permits` are held and, of the fair
-- waiters in `lockmacro_queue`, fewer than the free permits are ahead: all
-- of them for an ordinary attempt (`wait_ms` NULL), those that came before
-- it for a fair one, which joins the queue for `wait_ms` (0: does not
-- join). A read is taken while no write is held and no writer waits
-- (`lockmacro_writing`); the write while no share is held. A writer that
-- finds readers and will wait (`waiting`) marks the key, so that a stream
-- of readers cannot starve it.
--
-- Returns what `lockmacro_acquire` does, and the metadata of the first
-- holder in the way (NULL when what is in the way holds nothing: waiters).
-- A share this token holds already (a retry whose reply was lost) is
-- extended, with the fencing token minted the first time.
CREATE OR REPLACE FUNCTION lockmacro_acquire_shared(
    lock_key text, lock_value text, ttl_ms bigint, permits integer, held_as text,
    wait_ms bigint, waiting boolean, fence_key text
) RETURNS TABLE (busy integer, left_ms bigint, fence bigint, holder text)
LANGUAGE plpgsql AS $$
DECLARE
    now_ timestamptz;
    owner text := left(lock_value, 32);
    expires timestamptz;
    oldest record;
    writer record;
    held integer;
    marked timestamptz;
    place bigint;
    ahead integer;
    head timestamptz;
BEGIN
    PERFORM lockmacro_guard(lock_key);
    now_ := clock_timestamp();
    expires := now_ + ttl_ms * interval '1 millisecond';
    -- A transaction-scoped lock holds the key whole: busy, for as long as
    -- its transaction lasts (not known here).
    IF lockmacro_was_given_back(lock_value, now_)
        OR lockmacro_in_transaction(ARRAY[lock_key]) IS NOT NULL THEN
        RETURN QUERY SELECT 0, NULL::bigint, NULL::bigint, NULL::text;
        RETURN;
    END IF;
    PERFORM lockmacro_check_kind(lock_key, 0, coalesce(permits, 0), now_);
    UPDATE lockmacro_shares s SET expires_at = expires
        WHERE s.key = lock_key AND s.token = owner AND s.expires_at > now_;
    IF FOUND THEN
        RETURN QUERY SELECT NULL::integer, NULL::bigint, lockmacro_fence(fence_key, true),
            NULL::text;
        RETURN;
    END IF;
    DELETE FROM lockmacro_shares s WHERE s.key = lock_key AND s.expires_at <= now_;
    SELECT count(*)::integer INTO held FROM lockmacro_shares s WHERE s.key = lock_key;
    SELECT s.value, s.expires_at INTO oldest FROM lockmacro_shares s
        WHERE s.key = lock_key ORDER BY s.expires_at LIMIT 1;
    IF held_as = 'write' THEN
        IF held > 0 THEN
            IF waiting THEN
                INSERT INTO lockmacro_writing AS w (key, expires_at)
                    VALUES (lock_key, oldest.expires_at + interval '1 second')
                    ON CONFLICT (key) DO UPDATE
                        SET expires_at = greatest(w.expires_at, excluded.expires_at);
            END IF;
            RETURN QUERY SELECT 0, lockmacro_ms(oldest.expires_at - now_), NULL::bigint,
                substr(oldest.value, 33);
            RETURN;
        END IF;
        DELETE FROM lockmacro_writing w WHERE w.key = lock_key;
    ELSIF held_as = 'read' THEN
        SELECT s.value, s.expires_at INTO writer FROM lockmacro_shares s
            WHERE s.key = lock_key AND s.held_as = 'write';
        IF FOUND THEN
            RETURN QUERY SELECT 0, lockmacro_ms(writer.expires_at - now_), NULL::bigint,
                substr(writer.value, 33);
            RETURN;
        END IF;
        SELECT w.expires_at INTO marked FROM lockmacro_writing w
            WHERE w.key = lock_key AND w.expires_at > now_;
        IF marked IS NOT NULL THEN
            RETURN QUERY SELECT 0, lockmacro_ms(marked - now_), NULL::bigint, NULL::text;
            RETURN;
        END IF;
    ELSE
        DELETE FROM lockmacro_queue q WHERE q.key = lock_key AND q.expires_at <= now_;
        SELECT q.seq INTO place FROM lockmacro_queue q
            WHERE q.key = lock_key AND q.token = owner;
        SELECT count(*)::integer, min(q.expires_at) INTO ahead, head FROM lockmacro_queue q
            WHERE q.key = lock_key AND (place IS NULL OR q.seq < place);
        IF held + ahead >= permits THEN
            IF wait_ms > 0 AND place IS NULL THEN
                INSERT INTO lockmacro_queue (key, token, expires_at)
                    VALUES (lock_key, owner, now_ + wait_ms * interval '1 millisecond');
            END IF;
            IF held >= permits THEN
                RETURN QUERY SELECT 0, lockmacro_ms(oldest.expires_at - now_), NULL::bigint,
                    substr(oldest.value, 33);
            ELSE
                -- Waiters ahead take the free permits; this one tries again
                -- when a share goes or a waiter's wait ends.
                RETURN QUERY SELECT 0, lockmacro_ms(least(oldest.expires_at, head) - now_),
                    NULL::bigint, NULL::text;
            END IF;
            RETURN;
        END IF;
        DELETE FROM lockmacro_queue q WHERE q.key = lock_key AND q.token = owner;
    END IF;
    INSERT INTO lockmacro_shares (key, token, permits, held_as, value, expires_at)
        VALUES (lock_key, owner, permits, held_as, lock_value, expires);
    RETURN QUERY SELECT NULL::integer, NULL::bigint, lockmacro_fence(fence_key, false),
        NULL::text;
END
$$;

-- Turns the write of `lock_key` held by `owner` into a read, with the same
-- expiry, in one step (no writer can take the key in between), and wakes
-- the readers waiting behind it. Returns whether `owner` held the write.
CREATE OR REPLACE FUNCTION lockmacro_downgrade(lock_key text, owner text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM lockmacro_guard(lock_key);
    UPDATE lockmacro_shares s SET held_as = 'read'
        WHERE s.key = lock_key AND s.token = owner AND s.held_as = 'write'
            AND s.expires_at > clock_timestamp();
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    PERFORM pg_notify('lockmacro_release', lock_key);
    RETURN true;
END
$$;

-- What holds `lock_key`, for operators: one row per live lease (what it
-- holds, the semaphore's permits, its holder's metadata, the ms it has
-- left), or one row of NULLs when none does; each row also carries the
-- live fair waiters and the last token a lease minted from `fence_key`
-- (tokens of transaction-scoped locks are not remembered per key). Tokens
-- are never returned. A transaction-scoped lock is a row `transaction`
-- with no metadata and no time left, found in `pg_locks` (the advisory
-- lock of class 1819239276 on the key's hash, held in this database);
-- another key of the same hash would show it too.
CREATE OR REPLACE FUNCTION lockmacro_inspect(lock_key text, fence_key text)
RETURNS TABLE (
    held_as text, permits integer, metadata text, left_ms bigint, waiters bigint, fence bigint
)
LANGUAGE sql AS $$
    WITH n AS (
        SELECT clock_timestamp() AS at
    ), held AS (
        SELECT 'lock' AS held_as, NULL::integer AS permits, l.value, l.expires_at
            FROM lockmacro_locks l, n WHERE l.key = lock_key AND l.expires_at > n.at
        UNION ALL
        SELECT s.held_as, s.permits, s.value, s.expires_at
            FROM lockmacro_shares s, n WHERE s.key = lock_key AND s.expires_at > n.at
        UNION ALL
        SELECT 'transaction', NULL::integer, NULL::text, NULL::timestamptz
            FROM pg_locks p
            WHERE p.locktype = 'advisory' AND p.granted AND p.mode = 'ExclusiveLock'
                AND p.database = (SELECT d.oid FROM pg_database d
                    WHERE d.datname = current_database())
                AND p.classid = 1819239276::oid AND p.objsubid = 2
                AND p.objid = (hashtext(lock_key)::bigint & 4294967295)::oid
    )
    SELECT h.held_as, h.permits, substr(h.value, 33),
        CASE WHEN h.expires_at IS NOT NULL THEN lockmacro_ms(h.expires_at - n.at) END,
        (SELECT count(*) FROM lockmacro_queue q WHERE q.key = lock_key AND q.expires_at > n.at),
        (SELECT f.value FROM lockmacro_fences f WHERE f.key = fence_key)
    FROM n LEFT JOIN held h ON true
    ORDER BY h.expires_at
$$;

-- Deletes every lease on `lock_key`, whoever holds it: the lock, or every
-- share, and a waiting writer's mark. Each holder's next refresh then
-- finds nothing and its lease is lost; waiters are woken as by a release
-- (fair ones stay in line). Returns whether anything was held. A
-- transaction-scoped lock has no row and is left alone: it ends with its
-- transaction (or its session, `pg_terminate_backend`).
CREATE OR REPLACE FUNCTION lockmacro_force_release(lock_key text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    live integer;
BEGIN
    PERFORM lockmacro_guard(lock_key);
    DELETE FROM lockmacro_writing w WHERE w.key = lock_key;
    WITH gone AS (
        DELETE FROM lockmacro_locks l WHERE l.key = lock_key
            RETURNING l.expires_at > clock_timestamp() AS alive
    ), gone_shares AS (
        DELETE FROM lockmacro_shares s WHERE s.key = lock_key
            RETURNING s.expires_at > clock_timestamp() AS alive
    )
    SELECT (SELECT count(*) FROM gone g WHERE g.alive)
        + (SELECT count(*) FROM gone_shares g WHERE g.alive)
        INTO live;
    IF live > 0 THEN
        PERFORM pg_notify('lockmacro_release', lock_key);
    END IF;
    RETURN live > 0;
END
$$;


-- ---------------------------------------------------------------------
-- Fencing tokens across keys, and transaction-scoped locks.
-- ---------------------------------------------------------------------

-- Every fencing token comes from this one sequence: tokens increase across
-- keys, and a sequence never goes back, even across a crash (it may skip).
CREATE SEQUENCE IF NOT EXISTS lockmacro_fence_seq;

-- A schema from before the sequence counted each fence key from 1: start
-- the sequence above every token those counters gave. Only then, so that
-- running this again never moves the sequence back; the lock keeps
-- acquires from minting meanwhile.
DO $$
BEGIN
    LOCK TABLE lockmacro_fences IN SHARE ROW EXCLUSIVE MODE;
    PERFORM setval('lockmacro_fence_seq', f.top)
        FROM (SELECT max(value) AS top FROM lockmacro_fences) f, lockmacro_fence_seq s
        WHERE f.top > s.last_value;
END
$$;

-- A transaction-scoped lock is an advisory lock of class 1819239276 on the
-- key's hash, held by the caller's transaction until it ends. Advisory
-- locks are seen by every session at once, committed or not, which rows
-- written by a transaction still open are not. (Two keys with the same
-- hash exclude each other: one chance in four billion, and only ever a
-- lock refused that could have been taken.)

-- The index of the first of `lock_keys` that a transaction-scoped lock
-- holds, or NULL. Called by the acquires of leases, which end with their
-- statement: the shared advisory locks it takes end with them, and keep a
-- transaction from taking the keys meanwhile.
CREATE OR REPLACE FUNCTION lockmacro_in_transaction(lock_keys text[]) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    lock_key text;
    idx integer := 0;
BEGIN
    FOREACH lock_key IN ARRAY lock_keys LOOP
        IF NOT pg_try_advisory_xact_lock_shared(1819239276, hashtext(lock_key)) THEN
            RETURN idx;
        END IF;
        idx := idx + 1;
    END LOOP;
    RETURN NULL;
END
$$;

-- Takes `lock_key` for the rest of the calling transaction, or nothing.
-- Returns what `lockmacro_acquire` does: `busy` is 0 while a lease, shares
-- of it (permits, reads, a write), fair waiters or another transaction
-- hold it (`left_ms`: the rest of the lease, or of the share that ends
-- first). A key held as permits or read-write is answered busy, not
-- refused as another kind: an error would abort the caller's transaction.
-- A fencing token (`fenced`) comes from the shared sequence.
--
-- The transaction then ends when it sits idle for `ttl_ms`, or a statement
-- of it runs that long (its own shorter timeouts are kept): the server
-- ends it, it rolls back, and its lock with it. The commit delivers the
-- `lockmacro_release` notification sent here, which wakes the waiters.
--
-- Only under READ COMMITTED: later statements must see leases committed
-- since the transaction began.
CREATE OR REPLACE FUNCTION lockmacro_acquire_in_transaction(
    lock_key text, ttl_ms bigint, fenced boolean
) RETURNS TABLE (busy integer, left_ms bigint, fence bigint)
LANGUAGE plpgsql AS $$
DECLARE
    held timestamptz;
    timeout_name text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'a transaction-scoped lock needs READ COMMITTED, not %',
            upper(current_setting('transaction_isolation'))
            USING ERRCODE = 'feature_not_supported';
    END IF;
    -- A block with a handler is a subtransaction: leaving it by the
    -- exception gives back the advisory lock taken in it.
    BEGIN
        IF NOT pg_try_advisory_xact_lock(1819239276, hashtext(lock_key)) THEN
            RAISE EXCEPTION USING ERRCODE = 'LMBSY';
        END IF;
        SELECT l.expires_at INTO held
            FROM lockmacro_locks l WHERE l.key = lock_key AND l.expires_at > clock_timestamp();
        IF held IS NULL THEN
            SELECT min(s.expires_at) INTO held
                FROM lockmacro_shares s
                WHERE s.key = lock_key AND s.expires_at > clock_timestamp();
        END IF;
        IF held IS NULL THEN
            SELECT min(q.expires_at) INTO held
                FROM lockmacro_queue q
                WHERE q.key = lock_key AND q.expires_at > clock_timestamp();
        END IF;
        IF held IS NOT NULL THEN
            RAISE EXCEPTION USING ERRCODE = 'LMBSY';
        END IF;
    EXCEPTION WHEN SQLSTATE 'LMBSY' THEN
        RETURN QUERY SELECT 0, CASE WHEN held IS NOT NULL
            THEN lockmacro_ms(held - clock_timestamp()) END, NULL::bigint;
        RETURN;
    END;
    FOREACH timeout_name IN ARRAY ARRAY['idle_in_transaction_session_timeout', 'statement_timeout'] LOOP
        IF (SELECT s.setting::bigint NOT BETWEEN 1 AND ttl_ms FROM pg_settings s WHERE s.name = timeout_name) THEN
            PERFORM set_config(timeout_name, ttl_ms::text, true);
        END IF;
    END LOOP;
    PERFORM pg_notify('lockmacro_release', lock_key);
    RETURN QUERY SELECT NULL::integer, NULL::bigint,
        CASE WHEN fenced THEN nextval('lockmacro_fence_seq') END;
END
$$;

-- Deletes what no lease needs any more, at most `batch` rows of each
-- table, and returns how many it deleted: expired locks, shares, places
-- in fair queues, writers' marks and given-back tokens, and the fence rows
-- whose last token was minted more than `fence_idle_ms` ago (a fence row
-- only tells `lockmacro_inspect` the last token). Each backend runs it now
-- and then
-- (`PostgresConfig::sweep_every`). Rows another transaction is writing
-- are skipped, not waited for; an expired row an acquire takes meanwhile
-- is live again and kept.
CREATE OR REPLACE FUNCTION lockmacro_sweep(batch integer, fence_idle_ms bigint) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    now_ timestamptz := clock_timestamp();
    gone bigint;
    total bigint := 0;
BEGIN
    DELETE FROM lockmacro_locks l WHERE l.key IN (
        SELECT x.key FROM lockmacro_locks x WHERE x.expires_at <= now_
            LIMIT batch FOR UPDATE SKIP LOCKED
    ) AND l.expires_at <= now_;
    GET DIAGNOSTICS gone = ROW_COUNT;
    total := total + gone;
    DELETE FROM lockmacro_shares s WHERE (s.key, s.token) IN (
        SELECT x.key, x.token FROM lockmacro_shares x WHERE x.expires_at <= now_
            LIMIT batch FOR UPDATE SKIP LOCKED
    ) AND s.expires_at <= now_;
    GET DIAGNOSTICS gone = ROW_COUNT;
    total := total + gone;
    DELETE FROM lockmacro_queue q WHERE (q.key, q.token) IN (
        SELECT x.key, x.token FROM lockmacro_queue x WHERE x.expires_at <= now_
            LIMIT batch FOR UPDATE SKIP LOCKED
    ) AND q.expires_at <= now_;
    GET DIAGNOSTICS gone = ROW_COUNT;
    total := total + gone;
    DELETE FROM lockmacro_writing w WHERE w.key IN (
        SELECT x.key FROM lockmacro_writing x WHERE x.expires_at <= now_
            LIMIT batch FOR UPDATE SKIP LOCKED
    ) AND w.expires_at <= now_;
    GET DIAGNOSTICS gone = ROW_COUNT;
    total := total + gone;
    DELETE FROM lockmacro_given_back g WHERE g.token IN (
        SELECT x.token FROM lockmacro_given_back x WHERE x.expires_at <= now_
            LIMIT batch FOR UPDATE SKIP LOCKED
    ) AND g.expires_at <= now_;
    GET DIAGNOSTICS gone = ROW_COUNT;
    total := total + gone;
    DELETE FROM lockmacro_fences f WHERE f.key IN (
        SELECT x.key FROM lockmacro_fences x
            WHERE x.minted_at <= now_ - fence_idle_ms * interval '1 millisecond'
            LIMIT batch FOR UPDATE SKIP LOCKED
    ) AND f.minted_at <= now_ - fence_idle_ms * interval '1 millisecond';
    GET DIAGNOSTICS gone = ROW_COUNT;
    RETURN total + gone;
END
$$;

-- What the backend checks for before it creates anything, and whether what
-- it found is older than what it needs: the version of this file, raised
-- when it adds something. 1: leases; 2 was either shares (permits,
-- read-write locks) or the fence sequence and transaction-scoped locks;
-- 3: both; 4: the same tables, with functions that cost the server less;
-- 5: a retried acquire is minted a fencing token of its own; 6: a plain
-- lock in one insert (`lockmacro_take`, `lockmacro_give`), and a release
-- notifies only when a waiter listens; 7: expired rows and idle fence rows
-- are reaped (`lockmacro_sweep`).
-- Every statement above runs over any of them.
CREATE OR REPLACE FUNCTION lockmacro_schema_version() RETURNS integer
LANGUAGE sql IMMUTABLE AS $$ SELECT 7 $$;
