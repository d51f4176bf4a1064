# Body of a troupe wire frame (comm/wire_frame.hpp). The 16-byte frame header outside this
# message carries magic, version, frame type, body length and CRC-32; this schema only holds
# what a frame of that type says. It deliberately has no union of all messages: the frame type
# in the header selects the root struct, so an unknown type is refused before any parsing.
@0xa88ddde956d10184;

$import "/capnp/c++.capnp".namespace("troupe::wire::schema");

# Frame type 1: one chunk of a tensor. A tensor of `totalBytes` bytes crosses as `chunkCount`
# frames with chunkIndex 0, 1, ... in order; chunk i holds bytes [offset, offset + data.size).
struct TensorChunk {
  tensorId @0 :UInt64;      # chosen by the sender; groups the chunks of one tensor
  name @1 :Text;            # at most wire::max_name_bytes bytes
  dtype @2 :UInt8;          # wire::dtype
  shape @3 :List(Int64);    # at most wire::max_rank dimensions
  totalBytes @4 :UInt64;    # product(shape) * dtype size
  chunkIndex @5 :UInt32;
  chunkCount @6 :UInt32;
  offset @7 :UInt64;
  data @8 :Data;
}
