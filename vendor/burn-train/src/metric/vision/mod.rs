mod afine;
mod dice;
mod dists;
mod fid;
mod lpips;
mod ms_ssim;
mod psnr;
mod ssim;

pub use afine::*;
pub use dice::*;
pub use dists::*;
pub use fid::*;
pub use lpips::*;
pub use ms_ssim::*;
pub use psnr::*;
pub use ssim::*;
