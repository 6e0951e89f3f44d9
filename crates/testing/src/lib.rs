//! phalanx-testing (under construction).
