//! phalanx-store (under construction).
