// The replicas' shared tables (server/shared_queue.h) on a throwaway PostgreSQL of the test's
// own: two replicas never lease the same measurement, a lapsed lease returns it to the queue
// and its old holder can no longer end it, a measurement leased too often ends UNAVAILABLE, a
// pinned one goes to its agent's replica only, a job's lease is held by one replica until it
// lapses and a cancel reaches its driver, progress is kept in order, blobs go in parts and come
// back whole, and a replica's agents are listed while it is seen.
#include "shared_queue.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "kiln/digest.h"
#include "postgres_server.h"

namespace kiln::server {
namespace {

using kiln::testing::PostgresServer;
using std::chrono::milliseconds;

PostgresServer& postgres() {
  static std::unique_ptr<PostgresServer> server = std::make_unique<PostgresServer>();
  return *server;
}

class SharedQueueTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!PostgresServer::available()) {
      if (PostgresServer::required()) FAIL() << PostgresServer::missing();
      GTEST_SKIP() << PostgresServer::missing();
    }
    static int databases = 0;
    url_ = postgres().create("queue_" + std::to_string(++databases));
  }
  std::unique_ptr<SharedQueue> replica(const std::string& name,
                                       milliseconds lease = milliseconds(10'000)) {
    return std::make_unique<SharedQueue>(url_, name, lease);
  }
  static v1::MeasureRequest request(const std::string& key = "k", const std::string& agent = "") {
    v1::MeasureRequest r;
    r.set_key(key);
    r.set_agent(agent);
    r.mutable_op()->mutable_source()->set_text("func f { ... }");
    return r;
  }
  std::string url_;
};

TEST_F(SharedQueueTest, TwoReplicasLeasingAtOnceNeverTakeTheSameMeasurement) {
  auto r1 = replica("r1"), r2 = replica("r2");
  std::set<int64_t> queued;
  for (int i = 0; i < 100; ++i) queued.insert(r1->enqueue(1, request(), "sha"));
  std::mutex mu;
  std::vector<int64_t> leased;
  auto take = [&](SharedQueue* q) {
    for (;;) {
      std::vector<SharedTask> got = q->lease({{"k", 7}}, {}, 3);
      if (got.empty()) return;
      std::lock_guard<std::mutex> lock(mu);
      for (const SharedTask& t : got) {
        leased.push_back(t.id);
        EXPECT_EQ(t.job, 1);
        EXPECT_EQ(t.artifact, "sha");
        EXPECT_EQ(t.request.key(), "k");
      }
    }
  };
  std::thread a(take, r1.get()), b(take, r2.get());
  a.join(), b.join();
  EXPECT_EQ(leased.size(), 100u);  // each once
  EXPECT_EQ(std::set<int64_t>(leased.begin(), leased.end()), queued);
  // Another key's agents take nothing of these.
  int64_t other = r1->enqueue(1, request("other"), "sha");
  EXPECT_TRUE(r2->lease({{"k", 10}}, {}, 3).empty());
  EXPECT_EQ(r2->lease({{"other", 10}}, {}, 3).at(0).id, other);
}

TEST_F(SharedQueueTest, ALapsedLeaseReturnsTheMeasurementAndItsOldHolderCannotEndIt) {
  auto r1 = replica("r1", milliseconds(300)), r2 = replica("r2", milliseconds(300));
  int64_t id = r1->enqueue(1, request(), "sha");
  ASSERT_EQ(r1->lease({{"k", 1}}, {}, 3).size(), 1u);
  EXPECT_FALSE(r1->queued(id));
  EXPECT_TRUE(r2->lease({{"k", 1}}, {}, 3).empty());  // held
  std::this_thread::sleep_for(milliseconds(500));     // r1 died: no renewal
  ASSERT_EQ(r2->lease({{"k", 1}}, {}, 3).size(), 1u);
  EXPECT_FALSE(r1->finish_task(id, {Code::Ok, ""}, {}));
  EXPECT_FALSE(r1->take_end(id));  // still running at r2
  v1::MeasureResponse m;
  m.set_agent_id("r2/a");
  EXPECT_TRUE(r2->finish_task(id, {Code::Ok, ""}, m));
  std::optional<TaskEnd> end = r1->take_end(id);
  ASSERT_TRUE(end);
  EXPECT_FALSE(end->cancelled);
  EXPECT_TRUE(end->status.ok());
  EXPECT_EQ(end->response.agent_id(), "r2/a");
  EXPECT_GE(end->queued_ms, 0);
  // Taken: gone.
  std::optional<TaskEnd> again = r1->take_end(id);
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->cancelled);
}

TEST_F(SharedQueueTest, RenewingKeepsLeasesAndSaysWhichWereWithdrawn) {
  auto r1 = replica("r1", milliseconds(400)), r2 = replica("r2", milliseconds(400));
  int64_t a = r1->enqueue(1, request(), "sha"), b = r1->enqueue(1, request(), "sha");
  ASSERT_EQ(r1->lease({{"k", 2}}, {}, 3).size(), 2u);
  for (int i = 0; i < 4; ++i) {  // well past a lease, renewed
    std::this_thread::sleep_for(milliseconds(150));
    EXPECT_TRUE(r1->renew({a, b}).empty());
  }
  EXPECT_TRUE(r2->lease({{"k", 2}}, {}, 3).empty());
  r2->cancel_task(b);  // its driver withdrew it
  EXPECT_EQ(r1->renew({a, b}), std::set<int64_t>{b});
  EXPECT_FALSE(r1->finish_task(b, {Code::Ok, ""}, {}));
  EXPECT_TRUE(r1->finish_task(a, {Code::Ok, ""}, {}));
}

TEST_F(SharedQueueTest, AMeasurementLeasedByTooManyReplicasThatDiedEndsUnavailable) {
  auto q = replica("r1", milliseconds(100));
  int64_t id = q->enqueue(1, request(), "sha");
  for (int i = 0; i < 2; ++i) {
    ASSERT_EQ(q->lease({{"k", 1}}, {}, 2).size(), 1u) << i;
    std::this_thread::sleep_for(milliseconds(200));  // lapsed
  }
  EXPECT_TRUE(q->lease({{"k", 1}}, {}, 2).empty());  // a third time: ended instead
  std::optional<TaskEnd> end = q->take_end(id);
  ASSERT_TRUE(end);
  EXPECT_EQ(end->status.code, Code::Unavailable);
  EXPECT_NE(end->status.message.find("leased 2 times by replicas that went away"),
            std::string::npos)
      << end->status.message;
}

TEST_F(SharedQueueTest, AMeasurementPinnedToAnAgentGoesToItsReplicaOnly) {
  auto r1 = replica("r1"), r2 = replica("r2");
  int64_t id = r1->enqueue(1, request("k", "r2/x"), "sha");
  EXPECT_TRUE(r1->lease({{"k", 4}}, {"r1/a", "r1/x"}, 3).empty());
  std::vector<SharedTask> got = r2->lease({{"k", 4}}, {"r2/x"}, 3);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].id, id);
  EXPECT_EQ(got[0].request.agent(), "r2/x");
}

TEST_F(SharedQueueTest, AJobsLeaseIsOneReplicasUntilItLapsesAndACancelReachesItsDriver) {
  auto r1 = replica("r1", milliseconds(300)), r2 = replica("r2", milliseconds(300));
  EXPECT_FALSE(r1->job(7));
  ASSERT_TRUE(r1->claim_job(7));
  EXPECT_TRUE(r1->claim_job(7));   // its own again
  EXPECT_FALSE(r2->claim_job(7));  // live elsewhere
  std::optional<JobLease> l = r2->job(7);
  ASSERT_TRUE(l);
  EXPECT_EQ(l->owner, "r1");
  EXPECT_TRUE(l->live);
  EXPECT_FALSE(r2->orphan_job());

  r2->request_cancel(7);
  EXPECT_EQ(r1->cancel_requests(), std::vector<int64_t>{7});
  EXPECT_TRUE(r2->cancel_requests().empty());

  // Progress in order, from any replica.
  for (int i = 1; i <= 3; ++i) {
    v1::TuneProgress p;
    p.set_trials(i);
    r1->post(7, p);
  }
  int64_t last = 0;
  std::vector<v1::TuneProgress> got = r2->progress(7, 0, &last);
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[2].trials(), 3);
  EXPECT_TRUE(r2->progress(7, last, &last).empty());

  // r1 dies: past its lease and a lease's grace the job is an orphan, r2 adopts it, the cancel
  // asked still asked.
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_FALSE(r2->orphan_job());  // lapsed, but within the grace its driver has to renew it
  std::this_thread::sleep_for(milliseconds(400));
  EXPECT_EQ(r2->orphan_job(), 7);
  ASSERT_TRUE(r2->claim_job(7));
  EXPECT_EQ(r2->cancel_requests(), std::vector<int64_t>{7});
  EXPECT_TRUE(r2->renew({}).empty());
  EXPECT_EQ(r1->lost_jobs({7, 8}), std::vector<int64_t>{7});  // r1, back, stops driving it
  EXPECT_TRUE(r2->lost_jobs({7}).empty());
  r2->end_job(7, {Code::Cancelled, "cancelled at r1's request"});
  l = r1->job(7);
  ASSERT_TRUE(l);
  EXPECT_TRUE(l->ended);
  EXPECT_EQ(l->status.code, Code::Cancelled);
  EXPECT_FALSE(r1->orphan_job());
  got = r1->progress(7, 0, &last);  // its last message stays
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].trials(), 3);
}

TEST_F(SharedQueueTest, AReplicaLettingGoOfItsJobsLeavesThemForAnotherAtOnce) {
  auto r1 = replica("r1"), r2 = replica("r2");
  ASSERT_TRUE(r1->claim_job(1));
  ASSERT_TRUE(r1->claim_job(2));
  r1->release_jobs();
  EXPECT_TRUE(r2->orphan_job());
  EXPECT_TRUE(r2->claim_job(1));
  EXPECT_TRUE(r2->claim_job(2));
}

TEST_F(SharedQueueTest, ABlobIsPublishedInPartsAndFetchedWhole) {
  auto r1 = replica("r1"), r2 = replica("r2");
  std::string bytes(9 << 20, '\0');  // three parts
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>((i * 131) >> 3);
  std::string file = ::testing::TempDir() + "kiln_blob_" + std::to_string(getpid());
  std::ofstream(file, std::ios::binary) << bytes;
  std::string sha = sha256_hex(bytes);
  EXPECT_FALSE(r2->blob_size(sha));
  r1->publish_blob(sha, file, bytes.size());
  r1->publish_blob(sha, file, bytes.size());  // once is kept
  EXPECT_EQ(r2->blob_size(sha), bytes.size());
  std::string back;
  int pieces = 0;
  r2->fetch_blob(sha, [&](std::string_view p) {
    back += p;
    ++pieces;
  });
  EXPECT_EQ(pieces, 3);
  EXPECT_EQ(sha256_hex(back), sha);
  std::remove(file.c_str());
}

TEST_F(SharedQueueTest, AReplicasAgentsAreListedWhileItIsSeen) {
  auto r1 = replica("r1", milliseconds(300)), r2 = replica("r2", milliseconds(300));
  v1::Device d;
  d.set_key("k");
  d.set_triple("x86_64-linux-gnu");
  r1->heartbeat("10.0.0.1:50051", {{"r1", "a", "k", d, 1}, {"r1", "b", "k", d, 2}});
  r2->heartbeat("10.0.0.2:50051", {{"r2", "c", "other", d, 1}});
  std::vector<SharedAgent> k = r2->agents("k");
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ(k[1].agent, "b");
  EXPECT_EQ(k[1].slots, 2);
  EXPECT_EQ(k[1].device.triple(), "x86_64-linux-gnu");
  EXPECT_EQ(r1->agents().size(), 3u);
  r1->heartbeat("10.0.0.1:50051", {{"r1", "a", "k", d, 1}});  // b left
  EXPECT_EQ(r2->agents("k").size(), 1u);
  std::this_thread::sleep_for(milliseconds(500));  // r1 and r2 silent: gone
  EXPECT_TRUE(r2->agents().empty());
  r2->heartbeat("10.0.0.2:50051", {{"r2", "c", "other", d, 1}});
  EXPECT_EQ(r1->agents().size(), 1u);
  r2->leave();
  EXPECT_TRUE(r1->agents().empty());
}

TEST_F(SharedQueueTest, TwoLiveReplicasCannotShareAName) {
  auto r1 = replica("r1", milliseconds(300));
  r1->join("10.0.0.1:50051");
  auto again = replica("r1", milliseconds(300));
  try {
    again->join("10.0.0.2:50051");
    FAIL() << "two replicas named r1";
  } catch (const records::RecordsError& e) {
    EXPECT_NE(std::string(e.what()).find("replica r1 is up already at 10.0.0.1:50051"),
              std::string::npos)
        << e.what();
  }
  std::this_thread::sleep_for(milliseconds(500));  // the first one died
  EXPECT_NO_THROW(again->join("10.0.0.2:50051"));
}

}  // namespace
}  // namespace kiln::server
