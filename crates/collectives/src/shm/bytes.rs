//! Views of element slices as the bytes the shared buffers hold.

use phalanx_core::Element;

pub(super) fn as_bytes<T: Element>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

pub(super) fn byte_range<T>(start: usize, len: usize) -> std::ops::Range<usize> {
    let sz = std::mem::size_of::<T>();
    start * sz..(start + len) * sz
}

pub(super) fn as_bytes_mut<T: Element>(v: &mut [T]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}
