//! How an operation of the contract reads or changes the state: a
//! [`Query`] or an [`Apply`]. The answer's type of an operation is the
//! contract's ([`Op::Output`]); a command that is not an operation of the
//! contract (a group's tick, an entry of an older log format) names its own.

use std::fmt::Debug;

use super::{Command, State};
use crate::api::{Answer, Op};
use crate::types::Refusal;

/// A read: answered from a state that is up to date (linearizable).
pub trait Query: Op {
    /// `now_ms` is the leader's clock, for answers that report ages.
    fn query(self, state: &State, now_ms: i64) -> Result<Self::Output, Refusal>;
}

/// A write: an entry of the replicated log, applied by the state machine in
/// log order on every replica. [`Apply::apply`] must be deterministic: it
/// never reads a clock or draws a random number (times and ids come inside
/// the command).
pub trait Apply: Into<Command> + Clone + Debug + Send + Sync + 'static {
    type Output: Answer;
    fn apply(self, state: &mut State) -> Result<Self::Output, Refusal>;
    /// As [`Op::retry_is_safe`].
    fn retry_is_safe(&self) -> bool;
    /// Replaces every time its sender put in it with the leader's `now_ms`.
    fn restamp(&mut self, _now_ms: i64) {}
}

/// In the `impl Apply` of an operation of the contract: its answer's type
/// and whether it may be sent again are the contract's, written once there.
macro_rules! as_in_contract {
    () => {
        type Output = <Self as crate::api::Op>::Output;
        fn retry_is_safe(&self) -> bool {
            crate::api::Op::retry_is_safe(self)
        }
    };
}
pub(crate) use as_in_contract;
