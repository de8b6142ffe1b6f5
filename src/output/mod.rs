//! What the tool says besides its reports: progress and warnings.

pub mod progress;
pub mod warnings;
