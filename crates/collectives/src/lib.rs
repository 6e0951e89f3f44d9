//! phalanx-collectives (under construction).
