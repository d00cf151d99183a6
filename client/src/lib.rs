//! The native sluice client. Not written yet: see the issue "Native client
//! library and the `sluice` command line".
