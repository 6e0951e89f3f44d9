//! phalanx-data (under construction).
