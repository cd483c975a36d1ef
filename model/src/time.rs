//! Time as the models count it: whole ticks of the server's clock, shared by
//! every model.

/// The durations of a model, in ticks, and how far its clock runs.
///
/// ```
/// let timing = lockmacro_model::Timing::default();
/// assert!(timing.drift < timing.ttl);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Timing {
    /// The lease a client asks for (`PX ttl`).
    pub ttl: u8,
    /// The client's margin for clocks that disagree (`Backend::drift`): a
    /// lease's local deadline is `sent + ttl - drift`.
    pub drift: u8,
    /// A fair waiter's grant lease (`RedisConfig::grant_lease`), shorter
    /// than the ttl.
    pub grant: u8,
    /// `WAIT_MARGIN` of `waiters.lua`: how long the waiters flag outlives the
    /// holder's lease.
    pub margin: u8,
    /// The last tick the server's clock reaches: the bound that keeps every
    /// state space finite.
    pub horizon: u8,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            ttl: 3,
            drift: 1,
            grant: 2,
            margin: 1,
            horizon: 6,
        }
    }
}

impl Timing {
    /// The server time at which a client whose clock runs `skew` ticks slow
    /// stops trusting a lease confirmed by a request sent at `sent`
    /// (`lease.rs`, `Timing::new`: `sent + ttl - drift`).
    ///
    /// ```
    /// let timing = lockmacro_model::Timing::default();
    /// assert_eq!(timing.deadline(1, timing.ttl, 0), 3);
    /// ```
    pub fn deadline(&self, sent: u8, lease: u8, skew: u8) -> u8 {
        (sent + lease).saturating_sub(self.drift) + skew
    }
}
