# A checkpoint's manifest (storage/checkpoint.hpp): what was saved, where each value sits, and the
# checksums that prove the shard files are the ones written. Values are addressed in the job's
# global layout, the unsplit model's flat parameters in layer order, so a checkpoint does not
# depend on the mesh that wrote it. The manifest is written last and renamed into place: its
# presence is the commit record.
@0xf051656fea41ff41;

$import "/capnp/c++.capnp".namespace("troupe::storage::schema");

struct ModelSpec {
  kind @0 :Text;
  inputs @1 :Int64;
  hidden @2 :List(Int64);
  classes @3 :Int64;
  vocab @4 :Int64;
  context @5 :Int64;
  channels @6 :Int64;
  heads @7 :Int64;
  blocks @8 :Int64;
  # A mixture of experts (model_spec's experts ...): absent (0) in a dense model's manifest.
  experts @9 :Int64;
  topK @10 :Int64;
  moeEvery @11 :Int64;
  capacityFactor @12 :Float64;
  auxLossCoefficient @13 :Float64;
}

# Floats [local, local + count) of each section of a file hold global floats [global, global + count).
struct Run {
  local @0 :Int64;
  global @1 :Int64;
  count @2 :Int64;
}

# One array's values in a shard file: bytes [byteOffset, byteOffset + 4 * floats), CRC-32 of them.
struct Section {
  array @0 :Text;
  byteOffset @1 :Int64;
  floats @2 :Int64;
  crc32 @3 :UInt32;
  dtype @4 :Text;     # "f32", the only one written so far
}

struct ShardFile {
  name @0 :Text;      # relative to the checkpoint's directory
  bytes @1 :Int64;    # the file's size
  writer @2 :Text;    # who wrote it (a rank's description), for error messages
  sections @3 :List(Section);
  runs @4 :List(Run);  # the same for every section
}

struct Manifest {
  formatVersion @0 :UInt32;
  model @1 :ModelSpec;
  mesh @2 :Text;            # the writer's mesh, e.g. "dp2 x pp2 x tp1 (1 process)"
  zero @3 :Int32;
  offload @4 :Text;
  step @5 :Int64;           # steps completed: the resumed run starts at this one
  optimizerSteps @6 :Int64; # the optimizer's step count (AdamW's bias correction)
  optimizer @7 :Text;       # "adamw" or "sgd"
  optimizerConfig @8 :Text; # its hyperparameters, as text
  seed @9 :UInt64;          # the sampler's and the initialisation's seed
  batchSize @10 :Int64;     # global batch: with the seed and the step, the sampler's position
  stepsPerEpoch @11 :Int64;
  globalFloats @12 :Int64;  # floats of each array in the global layout
  arrays @13 :List(Text);   # "params", then the optimizer's state arrays
  files @14 :List(ShardFile);
  vocabulary @15 :Text;     # the GPT's characters, vocabulary[id] that of token id; empty for the MLP
}
