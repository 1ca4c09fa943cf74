// nezha-bench / nezha-tune command lines: getopt_long conventions and errors naming the flag.
#include "bench_args.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"

namespace nezha::tools {
namespace {

// Runs the parser on a command line; returns the error message ("" = parsed).
std::string parse(std::vector<std::string> args, BenchArgs& out, bool* help = nullptr) {
  args.insert(args.begin(), "nezha-bench");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  try {
    const bool ran = parseBenchArgs(static_cast<int>(args.size()), argv.data(), out, "usage\n");
    if (help != nullptr) *help = !ran;
    return "";
  } catch (const ConfigError& e) {
    return e.what();
  }
}

TEST(BenchArgsTest, BothValueFormsAndDefaults) {
  BenchArgs a;
  EXPECT_EQ(parse({"--op=broadcast", "--max-bytes", "64M", "--min-bytes=1K", "--check", "--iters=3",
                   "--json", "out.json"},
                  a),
            "");
  EXPECT_EQ(a.op, OpKind::kBroadcast);
  EXPECT_EQ(a.maxBytes, size_t(64) << 20);
  EXPECT_EQ(a.minBytes, size_t(1) << 10);
  EXPECT_TRUE(a.check);
  EXPECT_EQ(a.iters, 3);
  EXPECT_EQ(a.warmup, 5);  // untouched default
  EXPECT_EQ(a.json, "out.json");
  BenchArgs t;
  EXPECT_EQ(parse({"--out=table.json"}, t), "");  // nezha-tune's spelling of the same flag
  EXPECT_EQ(t.json, "table.json");
}

TEST(BenchArgsTest, HelpStopsParsing) {
  BenchArgs a;
  bool help = false;
  EXPECT_EQ(parse({"--help", "--bogus"}, a, &help), "");
  EXPECT_TRUE(help);
  EXPECT_EQ(parse({"-h"}, a, &help), "");
  EXPECT_TRUE(help);
}

TEST(BenchArgsTest, ErrorsNameTheFlag) {
  BenchArgs a;
  EXPECT_EQ(parse({"--bogus"}, a), "unknown flag --bogus (see --help)");
  EXPECT_EQ(parse({"--iters"}, a), "--iters needs a value (see --help)");
  EXPECT_EQ(parse({"stray"}, a), "unexpected argument stray (see --help)");
  EXPECT_NE(parse({"--iters=0"}, a).find("--iters"), std::string::npos);
  EXPECT_NE(parse({"--factor=1"}, a).find("--factor 1 must be"), std::string::npos);
  EXPECT_NE(parse({"--factor=nan"}, a).find("--factor"), std::string::npos);
  EXPECT_NE(parse({"--loop-seconds=inf"}, a).find("--loop-seconds"), std::string::npos);
  EXPECT_NE(parse({"--op", "barrier"}, a).find("--op barrier"), std::string::npos);
  EXPECT_EQ(parse({"--min-bytes=2K", "--max-bytes=1K"}, a),
            "--max-bytes is smaller than --min-bytes");
  BenchArgs fresh;
  EXPECT_EQ(parse({"--trace=x"}, fresh), "--trace needs --loop-seconds");
  BenchArgs ready;
  EXPECT_EQ(parse({"--ready-file=r"}, ready), "--ready-file needs --loop-seconds");
  EXPECT_EQ(parse({"--loop-seconds=1", "--ready-file="}, ready), "--ready-file needs a file name");
  BenchArgs looped;
  EXPECT_EQ(parse({"--loop-seconds=1", "--ready-file", "/tmp/r"}, looped), "");
  EXPECT_EQ(looped.readyFile, "/tmp/r");
  BenchArgs other;
  EXPECT_EQ(parse({"--vs-composed"}, other),
            "--vs-composed compares alltoall paths: it needs --op alltoall");
  BenchArgs paired;
  EXPECT_EQ(parse({"--paired-policy=fastest"}, paired),
            "--paired-policy fastest is unknown (want adaptive, static or single)");
  EXPECT_EQ(parse({"--paired-policy"}, paired), "--paired-policy needs a value (see --help)");
  BenchArgs pairedLoop;
  EXPECT_EQ(parse({"--paired-policy=single", "--loop-seconds=1"}, pairedLoop),
            "--paired-policy is for sweeps: not with --loop-seconds or --vs-composed");
  BenchArgs pairedOk;
  EXPECT_EQ(parse({"--paired-policy", "single"}, pairedOk), "");
  EXPECT_EQ(pairedOk.pairedPolicy, "single");
}

// alltoall sizes count the whole send buffer (world blocks), and the check recognises each
// sender's block: the output a correct alltoall gives passes, a block from the wrong rank fails.
TEST(BenchArgsTest, AlltoallSizesAndCheck) {
  BenchArgs a;
  EXPECT_EQ(parse({"--op=alltoall", "--vs-composed"}, a), "");
  EXPECT_EQ(a.op, OpKind::kAlltoall);
  EXPECT_TRUE(a.vsComposed);
  const int world = 3;
  const size_t count = countFor(OpKind::kAlltoall, 3 * 4 * 100, 4, world);
  EXPECT_EQ(count, 100u);
  EXPECT_EQ(bytesFor(OpKind::kAlltoall, count, 4, world), 1200u);
  EXPECT_EQ(inputCount(OpKind::kAlltoall, count, world), 300u);
  EXPECT_EQ(outputCount(OpKind::kAlltoall, count, world), 300u);
  std::vector<std::vector<float>> in(world, std::vector<float>(world * count));
  for (int r = 0; r < world; ++r) {
    fillInput(OpKind::kAlltoall, DataType::kFloat32, ReduceOp::kSum, r, 0, in[r].data(),
              world * count);
  }
  for (int me = 0; me < world; ++me) {
    std::vector<float> out(world * count);
    for (int p = 0; p < world; ++p) {
      for (size_t j = 0; j < count; ++j) out[p * count + j] = in[p][me * count + j];
    }
    EXPECT_EQ(checkOutput(OpKind::kAlltoall, DataType::kFloat32, ReduceOp::kSum, me, world, 0,
                          out.data(), count),
              0u);
    std::swap(out[0], out[count]);  // rank 0's and rank 1's first elements swapped
    EXPECT_GT(checkOutput(OpKind::kAlltoall, DataType::kFloat32, ReduceOp::kSum, me, world, 0,
                          out.data(), count),
              0u);
  }
}

}  // namespace
}  // namespace nezha::tools
