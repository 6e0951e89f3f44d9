//! phalanx-transport (under construction).
