// The streamed checkpoint load (model/weight_stream.h) on a checkpoint written by the real maker,
// `dsa make-checkpoint` (the narrow V3.2 layout of tests/cli/v32_narrow_lib.sh: FP8 linears with
// 128x128 scales, MoE, MTP, 4 shards + index): the streamed store holds exactly the bytes the
// host-copy loader (load_model_weights) produces, for every vector, while every host vector stays
// empty; the staging the loader counts never exceeds its bound and really carries every byte; a
// shard truncated after the index was written, a failing upload and a bad chunk size are each a
// Status naming what is wrong.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "dsa/model/checkpoint.h"
#include "dsa/model/dsa_model.h"
#include "dsa/model/model_config.h"
#include "dsa/model/model_weights.h"
#include "dsa/model/weight_store.h"
#include "dsa/model/weight_stream.h"
#include "dsa/model/weight_vectors.h"

namespace dsa::model {
namespace {

namespace fs = std::filesystem;

constexpr const char* kShard3 = "model-00003-of-000004.safetensors";

class CheckpointStream : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    root_ =
        new fs::path(fs::temp_directory_path() / ("dsa_ckstream_" + std::to_string(::getpid())));
    fs::remove_all(*root_);
    fs::create_directories(*root_);
    const std::string cmd =
        std::string(DSA_BINARY) + " make-checkpoint --config " + DSA_SOURCE_DIR +
        "/testdata/deepseek-v3.2/config.json --out " + (*root_ / "ck").string() +
        " --num-hidden-layers 3 --n-routed-experts 4 --hidden-size 256"
        " --set first_k_dense_replace=1 --set n_group=2 --set topk_group=1"
        " --set num_experts_per_tok=2 --set num_attention_heads=16 --set num_key_value_heads=16"
        " --set index_n_heads=16 --set q_lora_rank=128 --set intermediate_size=512"
        " --set moe_intermediate_size=128 --set vocab_size=6144 --set index_topk=128"
        " --shards 4 --seed 7 > " +
        (*root_ / "make.out").string() + " 2>&1";
    made_ = std::system(cmd.c_str()) == 0;
  }
  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(*root_, ec);
    delete root_;
  }
  void SetUp() override { ASSERT_TRUE(made_) << "make-checkpoint failed: see " << *root_; }
  static fs::path dir() { return *root_ / "ck"; }

  static fs::path* root_;
  static bool made_;
};
fs::path* CheckpointStream::root_ = nullptr;
bool CheckpointStream::made_ = false;

// Each vector's bytes on the host, or (with a store) where the store holds them.
struct Vec {
  const void* data;
  size_t host_bytes;
};
std::vector<Vec> vectors_of(const ModelWeights& w, const WeightStore* store = nullptr) {
  std::vector<Vec> out;
  for_each_weight_vector(w, [&](const auto& v) {
    const void* data = store ? static_cast<const void*>(store->get(v)) : v.data();
    out.push_back({data, v.size() * sizeof(v[0])});
  });
  return out;
}

void streams_bit_identical(const fs::path& dir, size_t chunk, bool stage) {
  StatusOr<ModelConfig> config = load_model_config(dir / "config.json");
  ASSERT_TRUE(config.ok()) << config.status().to_string();
  StatusOr<Checkpoint> ck = Checkpoint::open(dir);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  ASSERT_TRUE(ck->sharded());
  StatusOr<ModelWeights> ref = load_model_weights(*ck, *config);
  ASSERT_TRUE(ref.ok()) << ref.status().to_string();

  WeightStore store(kernels::Backend::kCpu);
  ModelWeights streamed;
  StreamOptions so;
  so.chunk_bytes = chunk;
  so.stage_on_host = stage;
  std::vector<LoadProgress> reports;
  so.progress = [&](const LoadProgress& p) { reports.push_back(p); };
  StatusOr<StreamStats> stats = stream_checkpoint(*ck, *config, so, streamed, store);
  ASSERT_TRUE(stats.ok()) << stats.status().to_string();

  const std::vector<Vec> want = vectors_of(*ref), got = vectors_of(streamed, &store);
  ASSERT_EQ(want.size(), got.size());  // the same structs: layers, experts, MTP, heads
  uint64_t stored = 0;
  size_t nonempty = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i].host_bytes, 0u) << "vector " << i << ": a host copy was kept";
    if (want[i].host_bytes == 0) continue;
    ++nonempty;
    stored += want[i].host_bytes;
    ASSERT_NE(got[i].data, nullptr) << "vector " << i;
    ASSERT_EQ(std::memcmp(got[i].data, want[i].data, want[i].host_bytes), 0) << "vector " << i;
  }
  EXPECT_GT(nonempty, 100u);
  // The shapes the forward reads came along (FP8 flagged though its codes live in the store).
  EXPECT_EQ(streamed.layers.size(), ref->layers.size());
  EXPECT_EQ(streamed.layers[1].attn.q_b.out, ref->layers[1].attn.q_b.out);
  EXPECT_TRUE(streamed.layers[1].attn.q_b.is_fp8());
  EXPECT_EQ(streamed.layers[1].moe->experts.size(), 4u);

  // Counted by the loader: every byte the store holds went through the upload, in chunks no
  // larger than the bound, and (staged) through slots no fuller than their size.
  const runtime::StagingStats& s = stats->staging;
  EXPECT_EQ(s.bytes, stored);
  EXPECT_LE(s.max_chunk, chunk);
  EXPECT_GE(s.chunks, (stored + chunk - 1) / chunk);
  if (stage) {
    EXPECT_EQ(s.slot_bytes, chunk);
    EXPECT_EQ(s.staging_bytes, 2 * chunk);
    EXPECT_LE(s.max_slot_fill, chunk);
    EXPECT_EQ(s.max_slot_fill, chunk);  // some tensor filled a whole slot: the bound was hit
  } else {
    EXPECT_EQ(s.staging_bytes, 0u);
  }
  EXPECT_EQ(stats->bytes, ck->total_bytes());
  EXPECT_EQ(stats->tensors, ck->names().size());
  // Progress: once per shard at least, the last one complete.
  ASSERT_GE(reports.size(), 4u);
  EXPECT_EQ(reports.back().shards_done, 4u);
  EXPECT_EQ(reports.back().tensors_done, reports.back().tensors_total);
  EXPECT_EQ(reports.back().bytes_done, reports.back().bytes_total);
}

TEST_F(CheckpointStream, StreamedWeightsAreBitIdenticalStraight) {
  streams_bit_identical(dir(), kDefaultLoadChunkBytes, false);
}

TEST_F(CheckpointStream, StreamedWeightsAreBitIdenticalThroughSmallStaging) {
  streams_bit_identical(dir(), 64 * 1024, true);
}

TEST_F(CheckpointStream, ModelLoadsAndRecordsItsStream) {
  ModelOptions o;
  o.max_requests = 1;
  o.max_context = 128;
  o.max_extend_rows = 16;
  auto m = DsaModel::load(dir(), o, kernels::cpu_ops());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const StreamStats& s = (*m)->load_stats();
  EXPECT_GT(s.tensors, 100u);
  EXPECT_GT(s.bytes, 1u << 20);
  EXPECT_GT(s.gb_per_s(), 0);
  EXPECT_NE(describe_load(s).find("GB/s"), std::string::npos);
}

// The maker wrote the index and the shards; then shard 3 lost its last 1000 bytes. The load
// fails before any weight is read, naming the shard and a tensor whose data is gone.
TEST_F(CheckpointStream, ShardTruncatedAfterTheIndexNamesFileAndTensor) {
  const fs::path bad = fs::path(dir()).concat("_truncated");
  fs::remove_all(bad);
  fs::copy(dir(), bad);
  const fs::path shard = bad / kShard3;
  const uint64_t size = fs::file_size(shard);
  std::ifstream in(shard, std::ios::binary);
  uint64_t header_len = 0;
  in.read(reinterpret_cast<char*>(&header_len), 8);
  std::string header(header_len, '\0');
  in.read(header.data(), std::streamsize(header_len));
  in.close();
  const uint64_t data_left = size - 1000 - 8 - header_len;
  std::vector<std::string> cut;  // tensors whose bytes the truncation removed
  const nlohmann::json tensors = nlohmann::json::parse(header);
  for (auto it = tensors.begin(); it != tensors.end(); ++it) {
    if (it.key() != "__metadata__" && it->at("data_offsets").at(1).get<uint64_t>() > data_left) {
      cut.push_back(it.key());
    }
  }
  ASSERT_FALSE(cut.empty());
  fs::resize_file(shard, size - 1000);

  ModelOptions o;
  o.max_requests = 1;
  o.max_context = 128;
  auto m = DsaModel::load(bad, o, kernels::cpu_ops());
  ASSERT_FALSE(m.ok());
  const std::string msg = m.status().message();
  EXPECT_NE(msg.find(kShard3), std::string::npos) << msg;
  EXPECT_NE(msg.find("data_offsets"), std::string::npos) << msg;
  bool named = false;
  for (const std::string& t : cut) named = named || msg.find(t) != std::string::npos;
  EXPECT_TRUE(named) << msg;
  fs::remove_all(bad);
}

// A copy of the checkpoint whose shard 3 has an old modification time, so that a write during the
// load is seen even within the file system's timestamp granularity.
fs::path copy_of(const fs::path& dir, const std::string& suffix) {
  const fs::path out = fs::path(dir).concat(suffix);
  fs::remove_all(out);
  fs::copy(dir, out);
  fs::last_write_time(out / kShard3, fs::file_time_type::clock::now() - std::chrono::hours(1));
  return out;
}

// The tensor a Status names after "<shard>: tensor ", if any.
std::string tensor_named(const std::string& msg, const fs::path& shard) {
  const std::string lead = shard.string() + ": tensor ";
  const size_t at = msg.find(lead);
  if (at == std::string::npos) return "";
  const size_t begin = at + lead.size();
  return msg.substr(begin, msg.find(':', begin) - begin);
}

// Shard 3 loses its data after the checkpoint was opened (and validated) but before its first
// tensor is read: the fstat before each tensor sees it.
TEST_F(CheckpointStream, ShardTruncatedAfterOpenNamesFileAndTensor) {
  const fs::path bad = copy_of(dir(), "_shrunk");
  StatusOr<ModelConfig> config = load_model_config(bad / "config.json");
  ASSERT_TRUE(config.ok());
  StatusOr<Checkpoint> ck = Checkpoint::open(bad);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  fs::resize_file(bad / kShard3, 1000);

  WeightStore store(kernels::Backend::kCpu);
  ModelWeights w;
  StatusOr<StreamStats> st = stream_checkpoint(*ck, *config, StreamOptions{}, w, store);
  ASSERT_FALSE(st.ok());
  const std::string msg = st.status().message();
  const std::string tensor = tensor_named(msg, bad / kShard3);
  ASSERT_FALSE(tensor.empty()) << msg;
  EXPECT_EQ(ck->path_of(tensor), (bad / kShard3).string()) << msg;
  EXPECT_NE(msg.find("changed size during the load"), std::string::npos) << msg;
  EXPECT_NE(msg.find("1000 now"), std::string::npos) << msg;
  fs::remove_all(bad);
}

// The same shard rewritten in place (same size) after open: its modification time gives it away.
TEST_F(CheckpointStream, ShardRewrittenAfterOpenNamesFileAndTensor) {
  const fs::path bad = copy_of(dir(), "_rewritten");
  StatusOr<ModelConfig> config = load_model_config(bad / "config.json");
  ASSERT_TRUE(config.ok());
  StatusOr<Checkpoint> ck = Checkpoint::open(bad);
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  {
    std::fstream f(bad / kShard3, std::ios::binary | std::ios::in | std::ios::out);
    f.seekp(-1, std::ios::end);
    f.put('\x5a');
  }
  WeightStore store(kernels::Backend::kCpu);
  ModelWeights w;
  StatusOr<StreamStats> st = stream_checkpoint(*ck, *config, StreamOptions{}, w, store);
  ASSERT_FALSE(st.ok());
  const std::string msg = st.status().message();
  EXPECT_FALSE(tensor_named(msg, bad / kShard3).empty()) << msg;
  EXPECT_NE(msg.find("modified during the load"), std::string::npos) << msg;
  fs::remove_all(bad);
}

// The worst case: shard 3 is truncated to nothing while one of its tensors is being copied (from
// the sink, after the check before the tensor passed), so the copy itself reads pages the file no
// longer has. Without the guard this is SIGBUS and the test binary dies; with it the copy reads
// zeros, and the check after the tensor reports the fault, naming the shard and that tensor. Both
// upload paths: straight from the mapping, and through the staging slots.
TEST_F(CheckpointStream, ShardTruncatedDuringACopyIsAStatusNotSigbus) {
  for (const bool stage : {false, true}) {
    const fs::path bad = copy_of(dir(), stage ? "_cut_staged" : "_cut_straight");
    const fs::path shard = bad / kShard3;
    StatusOr<ModelConfig> config = load_model_config(bad / "config.json");
    ASSERT_TRUE(config.ok());
    StatusOr<Checkpoint> ck = Checkpoint::open(bad);
    ASSERT_TRUE(ck.ok()) << ck.status().to_string();
    // Where shard 3's data lies in memory, to spot its first tensor as the sink receives it.
    int64_t idx = -1;
    for (size_t i = 0; i < ck->num_files(); ++i) {
      if (ck->file(i).path() == shard) idx = int64_t(i);
    }
    ASSERT_GE(idx, 0);
    const SafetensorsFile& f = ck->file(size_t(idx));
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (const std::string& n : f.names()) {
      StatusOr<TensorInfo> t = f.get(n);
      ASSERT_TRUE(t.ok());
      lo = std::min(lo, reinterpret_cast<uintptr_t>(t->data));
      hi = std::max(hi, reinterpret_cast<uintptr_t>(t->data) + t->nbytes);
    }

    WeightStore store(kernels::Backend::kCpu);
    StatusOr<runtime::StagedUpload> up =
        runtime::StagedUpload::create(kernels::Backend::kCpu, 64 * 1024, stage);
    ASSERT_TRUE(up.ok());
    bool cut = false;
    size_t cut_bytes = 0;
    WeightSink sink = [&](const void* key, const void* src, size_t bytes) {
      const auto at = reinterpret_cast<uintptr_t>(src);
      if (!cut && at >= lo && at < hi && bytes > 8192) {
        fs::resize_file(shard, 0);
        cut = true;
        cut_bytes = bytes;
      }
      return store.stream(key, src, bytes, *up);
    };
    ModelWeights w;
    Status s = stream_model_weights(*ck, *config, w, sink);
    ASSERT_TRUE(cut) << "no tensor of shard 3 went through the sink";
    ASSERT_FALSE(s.ok());
    const std::string msg = s.message();
    const std::string tensor = tensor_named(msg, shard);
    ASSERT_FALSE(tensor.empty()) << msg;
    StatusOr<TensorInfo> t = ck->get(tensor);
    ASSERT_TRUE(t.ok()) << msg;
    EXPECT_EQ(t->nbytes, cut_bytes) << msg;  // the tensor whose copy faulted, not a later one
    EXPECT_NE(msg.find("SIGBUS"), std::string::npos) << msg;
    EXPECT_NE(msg.find("truncated while dsa loaded it"), std::string::npos) << msg;
    fs::remove_all(bad);
  }
}

// An upload that fails (device memory exhausted, say) is reported with the tensor's shard and
// name, and the load stops there.
TEST_F(CheckpointStream, FailingUploadNamesFileAndTensor) {
  StatusOr<ModelConfig> config = load_model_config(dir() / "config.json");
  ASSERT_TRUE(config.ok());
  StatusOr<Checkpoint> ck = Checkpoint::open(dir());
  ASSERT_TRUE(ck.ok());
  int calls = 0;
  WeightSink sink = [&](const void*, const void*, size_t) {
    return ++calls == 5 ? resource_exhausted("out of device memory") : ok_status();
  };
  ModelWeights w;
  Status s = stream_model_weights(*ck, *config, w, sink);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(calls, 5);
  // The fifth vector handed over: embed_tokens, input_layernorm, post_attention_layernorm,
  // q_a_proj (FP8: its codes, then its scale).
  const std::string name = "model.layers.0.self_attn.q_a_proj.weight_scale_inv";
  EXPECT_NE(s.message().find(name), std::string::npos) << s.message();
  EXPECT_NE(s.message().find(ck->path_of(name)), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("out of device memory"), std::string::npos) << s.message();
}

TEST_F(CheckpointStream, ChunkSizeOutOfRangeIsRefused) {
  ModelOptions o;
  o.max_requests = 1;
  o.max_context = 128;
  o.load_chunk_bytes = 100;
  auto m = DsaModel::load(dir(), o, kernels::cpu_ops());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("load_chunk_bytes = 100"), std::string::npos)
      << m.status().message();
}

}  // namespace
}  // namespace dsa::model
