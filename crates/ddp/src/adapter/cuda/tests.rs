//! On a machine with a GPU: the address `with_device_slice` hands out is the tensor's memory,
//! and what is written there is what Burn reads afterwards. Without one, says so and passes
//! (the GPU check runs this binary on a lent GPU machine: gpu/check.sh).

use std::ffi::{c_int, c_void};

use burn::tensor::{Device, Tensor, TensorData};
use libloading::Library;

use super::{is_cuda, with_device_slice};

/// The four driver calls the test needs to read and write device memory itself.
struct Driver {
    _lib: Library,
    dtoh: unsafe extern "C" fn(*mut c_void, u64, usize) -> c_int,
    htod: unsafe extern "C" fn(u64, *const c_void, usize) -> c_int,
}

impl Driver {
    /// The driver with GPU 0's primary context current on this thread (Burn's context), or
    /// why not.
    fn open() -> Result<Driver, String> {
        type Init = unsafe extern "C" fn(u32) -> c_int;
        type Count = unsafe extern "C" fn(*mut c_int) -> c_int;
        type Get = unsafe extern "C" fn(*mut c_int, c_int) -> c_int;
        type Retain = unsafe extern "C" fn(*mut *mut c_void, c_int) -> c_int;
        type SetCurrent = unsafe extern "C" fn(*mut c_void) -> c_int;
        // SAFETY: the driver API's documented signatures (cuda.h), valid out-pointers.
        unsafe {
            let lib = Library::new("libcuda.so.1").map_err(|e| format!("libcuda.so.1: {e}"))?;
            let sym = |e: libloading::Error| e.to_string();
            let init: libloading::Symbol<Init> = lib.get(b"cuInit\0").map_err(sym)?;
            let count: libloading::Symbol<Count> = lib.get(b"cuDeviceGetCount\0").map_err(sym)?;
            let get: libloading::Symbol<Get> = lib.get(b"cuDeviceGet\0").map_err(sym)?;
            let retain: libloading::Symbol<Retain> =
                lib.get(b"cuDevicePrimaryCtxRetain\0").map_err(sym)?;
            let set: libloading::Symbol<SetCurrent> = lib.get(b"cuCtxSetCurrent\0").map_err(sym)?;
            let (mut n, mut dev, mut ctx) = (0, 0, std::ptr::null_mut());
            if init(0) != 0 || count(&mut n) != 0 || n == 0 {
                return Err("no usable GPU (cuInit or cuDeviceGetCount)".into());
            }
            assert_eq!(get(&mut dev, 0), 0, "cuDeviceGet");
            assert_eq!(retain(&mut ctx, dev), 0, "cuDevicePrimaryCtxRetain");
            assert_eq!(set(ctx), 0, "cuCtxSetCurrent");
            let dtoh = *lib.get(b"cuMemcpyDtoH_v2\0").map_err(sym)?;
            let htod = *lib.get(b"cuMemcpyHtoD_v2\0").map_err(sym)?;
            Ok(Driver {
                _lib: lib,
                dtoh,
                htod,
            })
        }
    }
}

#[test]
fn device_slice_is_the_tensors_memory_and_burn_sees_writes() {
    assert!(!is_cuda(&Device::flex()));
    let driver = match Driver::open() {
        Ok(d) => d,
        Err(why) => {
            eprintln!("skipped: {why}");
            return;
        }
    };
    let device = Device::cuda(0);
    assert!(is_cuda(&device));
    assert!(is_cuda(&device.clone().autodiff()));
    let a: Vec<f32> = (0..1000).map(|i| i as f32).collect();
    let a = Tensor::<1>::from_data(TensorData::new(a, [1000]), &device);
    let b = Tensor::<1>::from_data(TensorData::new(vec![5.0f32; 24], [24]), &device);
    // A kernel's fresh output, as a bucket is.
    let flat = Tensor::cat(vec![a, b.clone() * 1.0], 0);
    let seen = with_device_slice(&flat, 0, |slice| {
        assert_eq!(slice.len, 1024);
        let mut host = vec![0f32; slice.len];
        // SAFETY: `slice` is 1024 f32 of device memory, held by `with_device_slice`.
        let rc = unsafe { (driver.dtoh)(host.as_mut_ptr().cast(), slice.ptr, 4096) };
        assert_eq!(rc, 0, "cuMemcpyDtoH");
        let doubled: Vec<f32> = host.iter().map(|v| v * 2.0).collect();
        // SAFETY: as above; the write is what NCCL does in place.
        let rc = unsafe { (driver.htod)(slice.ptr, doubled.as_ptr().cast(), 4096) };
        assert_eq!(rc, 0, "cuMemcpyHtoD");
        Ok(host)
    })
    .unwrap();
    let expected: Vec<f32> = (0..1000).map(|i| i as f32).chain([5.0; 24]).collect();
    assert_eq!(seen, expected, "the address is not the tensor's memory");
    let after = flat
        .slice(990..1010)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let doubled: Vec<f32> = expected[990..1010].iter().map(|v| v * 2.0).collect();
    assert_eq!(after, doubled, "Burn does not see the in-place write");
    // The inputs are untouched.
    assert_eq!(b.into_data().try_to_vec::<f32>().unwrap(), vec![5.0; 24]);
}

#[test]
fn pinned_staging_round_trips_a_bucket() {
    if let Err(why) = Driver::open() {
        eprintln!("skipped: {why}");
        return;
    }
    let device = Device::cuda(0);
    let values: Vec<f32> = (0..3000).map(|i| i as f32 * 0.5).collect();
    let t = Tensor::<1>::from_data(TensorData::new(values.clone(), [3000]), &device);
    let flat = Tensor::cat(vec![t.clone(), t], 0);
    let mut staging = phalanx_pg::PinnedStaging::new().unwrap();
    with_device_slice(&flat, 0, |slice| {
        // SAFETY: the bucket's memory, held by `with_device_slice`.
        let host = unsafe { staging.download(slice) }.unwrap();
        let host: &mut [f32] = bytemuck::cast_slice_mut(host);
        assert_eq!(&host[..3000], &values[..]);
        assert_eq!(&host[3000..], &values[..]);
        host.iter_mut().for_each(|v| *v += 1.0);
        // SAFETY: as above.
        unsafe { staging.upload(slice) }.unwrap();
        Ok(())
    })
    .unwrap();
    assert!(staging.capacity() >= 6000 * 4);
    let after = flat
        .slice(2995..3005)
        .into_data()
        .try_to_vec::<f32>()
        .unwrap();
    let expected: Vec<f32> = values[2995..3000]
        .iter()
        .chain(&values[..5])
        .map(|v| v + 1.0)
        .collect();
    assert_eq!(after, expected, "Burn does not see the staged upload");
}
