//! The read path below the handlers: where partitions' offsets are stored (the extent cache, confirmed through the watermarks), topics looked up, the reading of extents, and share-group members' sessions with this agent.

pub mod extent_cache;
pub mod extent_reader;
pub mod pushed;
pub mod share_sessions;
pub mod topic_cache;
pub mod watermarks;
