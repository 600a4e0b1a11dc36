//! Where fresh ids come from. Object keys and lease names need ids no one
//! else will draw; the agent draws them at random, and the simulation from a
//! seeded generator so that a seed replays the same run. `clippy.toml` bans
//! `Uuid::new_v4` everywhere else.

use uuid::Uuid;

/// A source of fresh ids.
pub trait Ids: Send + Sync + 'static {
    fn next_id(&self) -> Uuid;
}

/// Random (v4) ids: what a real agent uses.
pub struct RandomIds;

impl Ids for RandomIds {
    #[allow(clippy::disallowed_methods)]
    fn next_id(&self) -> Uuid {
        Uuid::new_v4()
    }
}
