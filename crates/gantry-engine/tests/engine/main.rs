//! The engine's integration tests: one binary (suite time), modules by theme.

mod properties;
mod scenarios;
mod support;
