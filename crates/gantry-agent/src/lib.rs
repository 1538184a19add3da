//! The node agent's pieces. Today: GPU discovery for this machine ([`discover`]), which
//! `gantry serve --local` and `gantry discover` use. The remote agent (`gantry agent`) that
//! registers with a controller over the network comes later.

pub mod discover;
