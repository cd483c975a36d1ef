//! Channels and patterns, and who listens on them: the wake-ups the runtime
//! publishes when a lock is released or handed over.

use std::collections::BTreeMap;

use tokio::sync::mpsc::UnboundedSender;

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
}

impl PubSub {
    pub fn subscribe(&mut self, pattern: bool, name: &[u8], conn: u64, mailbox: &Mailbox) {
        let map = if pattern {
            &mut self.patterns
        } else {
            &mut self.channels
        };
        map.entry(name.to_vec())
            .or_default()
            .insert(conn, mailbox.clone());
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
    }

    /// Forgets a closed connection.
    pub fn forget(&mut self, conn: u64) {
        for map in [&mut self.channels, &mut self.patterns] {
            map.values_mut().for_each(|listeners| {
                listeners.remove(&conn);
            });
            map.retain(|_, listeners| !listeners.is_empty());
        }
    }

    /// Every listener drops off (the server restarted).
    pub fn clear(&mut self) {
        self.channels.clear();
        self.patterns.clear();
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
