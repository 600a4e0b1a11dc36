//! The read path below the handlers: where partitions' offsets are stored (the extent cache, confirmed through the watermarks), topics looked up, and the reading of extents.

pub mod extent_cache;
pub mod extent_reader;
pub mod topic_cache;
pub mod watermarks;
