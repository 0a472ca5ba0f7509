//! The simulator's universes, and (with `--features planted-bugs`, which `make test` builds apart)
//! its teeth: every planted bug found.

mod teeth;
mod universes;
