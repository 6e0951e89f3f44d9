//! phalanx-launch (under construction).
