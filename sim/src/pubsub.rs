//! Channels and patterns, and who listens on them: the wake-ups the runtime
//! publishes when a lock is released or handed over.

use std::collections::BTreeMap;

use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;

use crate::commands::glob_match;
use crate::keyspace::Bytes;
use crate::reply::Reply;

/// A connection's mailbox: messages written to it as pushes (RESP3) or
/// arrays (RESP2) when it next writes.
pub type Mailbox = UnboundedSender<Reply>;

#[derive(Debug, Default)]
pub struct PubSub {
    channels: BTreeMap<Bytes, BTreeMap<u64, Mailbox>>,
    patterns: BTreeMap<Bytes, BTreeMap<u64, Mailbox>>,
    /// The number of subscriptions, for a test to wait on (a waiter that
    /// listens) without polling.
    count: watch::Sender<usize>,
}

impl PubSub {
    fn recount(&self) {
        let count = self
            .channels
            .values()
            .chain(self.patterns.values())
            .map(BTreeMap::len)
            .sum();
        self.count.send_replace(count);
    }

    /// Follows the number of subscriptions, channels and patterns.
    pub fn watch_count(&self) -> watch::Receiver<usize> {
        self.count.subscribe()
    }

    /// `PUBSUB NUMSUB`'s count for `channel`.
    pub fn listeners(&self, channel: &[u8]) -> usize {
        self.channels.get(channel).map_or(0, BTreeMap::len)
    }

    /// `PUBSUB CHANNELS [pattern]`.
    pub fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        self.channels
            .keys()
            .filter(|c| pattern.is_none_or(|p| glob_match(p, c)))
            .cloned()
            .collect()
    }

    pub fn patterns(&self) -> usize {
        self.patterns.len()
    }

    pub fn subscribe(&mut self, pattern: bool, name: &[u8], conn: u64, mailbox: &Mailbox) {
        let map = if pattern {
            &mut self.patterns
        } else {
            &mut self.channels
        };
        map.entry(name.to_vec())
            .or_default()
            .insert(conn, mailbox.clone());
        self.recount();
    }

    pub fn unsubscribe(&mut self, pattern: bool, name: &[u8], conn: u64) {
        let map = if pattern {
            &mut self.patterns
        } else {
            &mut self.channels
        };
        if let Some(listeners) = map.get_mut(name) {
            listeners.remove(&conn);
            if listeners.is_empty() {
                map.remove(name);
            }
        }
        self.recount();
    }

    /// Forgets a closed connection.
    pub fn forget(&mut self, conn: u64) {
        for map in [&mut self.channels, &mut self.patterns] {
            map.values_mut().for_each(|listeners| {
                listeners.remove(&conn);
            });
            map.retain(|_, listeners| !listeners.is_empty());
        }
        self.recount();
    }

    /// Every listener drops off (the server restarted).
    pub fn clear(&mut self) {
        self.channels.clear();
        self.patterns.clear();
        self.recount();
    }

    /// `PUBLISH`: how many received it, as Redis counts (a connection
    /// matching by a channel and a pattern counts twice).
    pub fn publish(&self, channel: &[u8], message: &[u8]) -> i64 {
        let mut received = 0;
        if let Some(listeners) = self.channels.get(channel) {
            for mailbox in listeners.values() {
                let push = vec![
                    Reply::bulk("message"),
                    Reply::bulk(channel),
                    Reply::bulk(message),
                ];
                received += mailbox.send(Reply::Push(push)).is_ok() as i64;
            }
        }
        for (pattern, listeners) in &self.patterns {
            if !glob_match(pattern, channel) {
                continue;
            }
            for mailbox in listeners.values() {
                let push = vec![
                    Reply::bulk("pmessage"),
                    Reply::bulk(pattern),
                    Reply::bulk(channel),
                    Reply::bulk(message),
                ];
                received += mailbox.send(Reply::Push(push)).is_ok() as i64;
            }
        }
        received
    }
}
