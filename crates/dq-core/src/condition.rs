//! Retry conditions (being written).
