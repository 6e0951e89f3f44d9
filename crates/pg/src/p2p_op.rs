//! [`P2POp`]: one send or receive of [`ProcessGroup::batch_isend_irecv`]
//! (crate::ProcessGroup::batch_isend_irecv), PyTorch's `dist.P2POp`.

use phalanx_core::Element;

/// One point-to-point operation of a batch. The buffers travel with the operation and come
/// back from the batch's `Work`: a `Recv`'s buffer then holds what arrived.
///
/// ```
/// use phalanx_pg::P2POp;
/// let op = P2POp::Recv { buf: vec![0f32; 4], peer: 1, tag: 7 };
/// assert_eq!((op.peer(), op.tag(), op.buf().len()), (1, 7, 4));
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum P2POp<T> {
    /// Send `buf` to `peer`.
    Send {
        /// What to send.
        buf: Vec<T>,
        /// Destination rank.
        peer: usize,
        /// Tag the receive must name.
        tag: u32,
    },
    /// Receive into `buf` (its length is the count expected) from `peer`.
    Recv {
        /// Where the message goes.
        buf: Vec<T>,
        /// Source rank.
        peer: usize,
        /// Tag the send must name.
        tag: u32,
    },
}

impl<T: Element> P2POp<T> {
    /// The other rank.
    pub fn peer(&self) -> usize {
        match self {
            P2POp::Send { peer, .. } | P2POp::Recv { peer, .. } => *peer,
        }
    }

    /// The tag.
    pub fn tag(&self) -> u32 {
        match self {
            P2POp::Send { tag, .. } | P2POp::Recv { tag, .. } => *tag,
        }
    }

    /// The buffer: what is sent, or what was received once the batch is done.
    pub fn buf(&self) -> &[T] {
        match self {
            P2POp::Send { buf, .. } | P2POp::Recv { buf, .. } => buf,
        }
    }

    /// The buffer, by value.
    pub fn into_buf(self) -> Vec<T> {
        match self {
            P2POp::Send { buf, .. } | P2POp::Recv { buf, .. } => buf,
        }
    }
}
