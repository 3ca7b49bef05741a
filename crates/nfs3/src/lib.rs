//! NFSv3 and MOUNT v3 procedures on top of the storage layer.

pub mod export;
