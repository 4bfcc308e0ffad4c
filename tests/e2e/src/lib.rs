//! End-to-end tests live in `tests/`; this crate has no code of its own. They start the real binaries
//! (built by `scripts/test.sh` before the tests run) against private Redis servers.
