//! The engine's integration tests: one binary (suite time), modules by theme.

// Table-driven cases spell their row types out; that is the point of a table.
#![allow(clippy::type_complexity)]

mod boundary;
mod moves;
mod online;
mod properties;
mod reconfigure;
mod scenarios;
mod scheduler;
mod support;
