//! phalanx-ddp (under construction).
