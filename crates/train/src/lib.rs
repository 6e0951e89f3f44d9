//! phalanx-train (under construction).
