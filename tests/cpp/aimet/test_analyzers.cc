// AIMET's encoding analyzers in C++ (polyquant/aimet_analyzers.h): option validation (issue 17:
// SQNR candidate counts of 0 / 1 crashed or gave NaN), empty batches, set_state's size checks, the
// state round trip, self-merge and concurrent use of one analyzer.
#include <cstring>
#include <thread>
#include <vector>

#include "polyquant/aimet_analyzers.h"
#include "test_util.h"

namespace polyquant {
namespace {

using test::expect_error;
namespace aimet = polyquant::aimet;

aimet::AnalyzerShape per_tensor() {
  aimet::AnalyzerShape s;
  s.shape = Dims{1};
  return s;
}

std::vector<float> ramp(std::int64_t n, float lo, float hi) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) v[static_cast<std::size_t>(i)] = lo + (hi - lo) * static_cast<float>(i) / static_cast<float>(n - 1);
  return v;
}

TensorView view1d(const std::vector<float>& v) {
  return TensorView(v.data(), DType::kFloat32, Dims{static_cast<std::int64_t>(v.size())}, Dims{1});
}

TEST(AimetAnalyzers, SqnrCandidateCountsAreValidated) {
  for (std::int64_t bad : {std::int64_t{0}, std::int64_t{1}, std::int64_t{-1}, (std::int64_t{1} << 24) + 1}) {
    aimet::SqnrOptions o;
    o.num_bins = 64;
    o.asymmetric_delta_candidates = bad;
    expect_error([&] { aimet::SqnrEncodingAnalyzer(per_tensor(), o); }, ErrorKind::kValue, {"asymmetric_delta_candidates", "2 to"});
    o.asymmetric_delta_candidates = 17;
    o.symmetric_delta_candidates = bad;
    expect_error([&] { aimet::SqnrEncodingAnalyzer(per_tensor(), o); }, ErrorKind::kValue, {"symmetric_delta_candidates", "2 to"});
  }
  for (std::int64_t bad : {0, 2, -5}) {
    aimet::SqnrOptions o;
    o.offset_candidates = bad;
    expect_error([&] { aimet::SqnrEncodingAnalyzer(per_tensor(), o); }, ErrorKind::kValue, {"offset_candidates", "1 or"});
  }
  aimet::SqnrOptions o;
  o.num_bins = 64;
  o.asymmetric_delta_candidates = o.symmetric_delta_candidates = 2;
  o.offset_candidates = 1;  // only the observed offset
  aimet::SqnrEncodingAnalyzer a(per_tensor(), o);
  const auto x = ramp(100, -1, 1);
  a.update_stats(view1d(x));
  for (bool sym : {false, true}) {
    const aimet::EncodingRange r = a.compute_encodings(255, sym);
    EXPECT_TRUE(std::isfinite(r.min[0]) && std::isfinite(r.max[0]) && r.min[0] <= 0 && r.max[0] > 0) << r.min[0] << " " << r.max[0];
  }
}

TEST(AimetAnalyzers, EmptyBatchIsAValueError) {
  const std::vector<float> none;
  const TensorView empty(none.data(), DType::kFloat32, Dims{0}, Dims{1});
  aimet::MinMaxEncodingAnalyzer mm(per_tensor());
  expect_error([&] { mm.update_stats(empty); }, ErrorKind::kValue, "batch is empty");
  aimet::PercentileEncodingAnalyzer pc(per_tensor(), 16, 99);
  expect_error([&] { pc.update_stats(empty); }, ErrorKind::kValue, "batch is empty");
  expect_error([&] { pc.compute_dynamic_encodings(empty, 255, false); }, ErrorKind::kValue, "batch is empty");
  EXPECT_FALSE(pc.has_stats());
}

TEST(AimetAnalyzers, SetStateChecksSizesAndRoundTrips) {
  aimet::AnalyzerShape shape;
  shape.shape = Dims{2, 1};
  aimet::PercentileEncodingAnalyzer a(shape, 32, 99);
  std::vector<float> x(2 * 300);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = std::sin(static_cast<float>(i)) * (i < 300 ? 1.0f : 3.0f);
  const TensorView v(x.data(), DType::kFloat32, Dims{2, 300}, Dims{300, 1});
  a.update_stats(v);
  const aimet::HistogramState s = a.state();
  aimet::PercentileEncodingAnalyzer b(shape, 32, 99);
  b.set_state(s);
  for (bool sym : {false, true}) {
    const auto p = a.compute_encodings(255, sym), q = b.compute_encodings(255, sym);
    EXPECT_EQ(std::memcmp(p.min.data(), q.min.data(), 16), 0);
    EXPECT_EQ(std::memcmp(p.max.data(), q.max.data(), 16), 0);
  }
  auto bad = s;
  bad.counts.pop_back();
  expect_error([&] { b.set_state(bad); }, ErrorKind::kValue, "histogram");
  bad = s;
  bad.edges.push_back(0);
  expect_error([&] { b.set_state(bad); }, ErrorKind::kValue, "bin_edges");
  bad = s;
  bad.num_bins = 31;
  expect_error([&] { b.set_state(bad); }, ErrorKind::kValue, "num_bins");
  bad = s;
  bad.limit_hi.clear();
  expect_error([&] { b.set_state(bad); }, ErrorKind::kValue, "range_limit");
  bad = s;
  bad.dtype = DType::kInt8;
  expect_error([&] { b.set_state(bad); }, ErrorKind::kValue, "dtype");
  aimet::MinMaxEncodingAnalyzer m(shape);
  aimet::MinMaxEncodingAnalyzer::State ms;
  ms.min = {0.0};
  ms.max = {1.0, 2.0};
  expect_error([&] { m.set_state(ms); }, ErrorKind::kValue, "min and max");
}

TEST(AimetAnalyzers, SelfMergeDoublesCountsAndConcurrentUpdatesAreSerial) {
  aimet::PercentileEncodingAnalyzer a(per_tensor(), 64, 99);
  auto x = ramp(4096, -2, 2);
  a.update_stats(view1d(x));
  const auto before = a.state();
  a.merge(a);
  const auto after = a.state();
  for (std::size_t i = 0; i < before.counts.size(); ++i) EXPECT_EQ(after.counts[i], 2 * before.counts[i]);
  // 8 threads x 8 batches of the same range: the counts add exactly whatever the order.
  aimet::PercentileEncodingAnalyzer shared(per_tensor(), 64, 99), serial(per_tensor(), 64, 99);
  shared.update_stats(view1d(x));
  serial.update_stats(view1d(x));
  for (int i = 0; i < 64; ++i) serial.update_stats(view1d(x));
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < 8; ++i) shared.update_stats(view1d(x));
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(shared.state().counts, serial.state().counts);
}

}  // namespace
}  // namespace polyquant
