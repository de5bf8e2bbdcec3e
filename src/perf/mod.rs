//! Performance mechanisms beside the domain layer, on one queue mechanism
//! (`lanes`): group commit for every ordinary write (`commits`), quick writes (the
//! lease cycle, plain creations and revisions) grouped in one statement (`quick`),
//! grouped single-row reads (`readgroup`); and the list cache (`listcache`) and the
//! search statistics a search plans from (`searchstats`). Each keeps the answer the
//! ordinary path would give; none decides a rule. They import store, db, config,
//! metrics and error, never `domain` or `http`.

pub mod commits;
pub mod lanes;
pub mod listcache;
pub mod quick;
pub mod readgroup;
pub mod searchstats;
