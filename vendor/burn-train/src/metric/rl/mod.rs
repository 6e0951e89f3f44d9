mod cum_reward;
mod ep_len;
mod exploration_rate;

pub use cum_reward::*;
pub use ep_len::*;
pub use exploration_rate::*;
