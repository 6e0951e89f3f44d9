//! phalanx-pg (under construction).
