// Content-addressed blobs (server/blob_store.h) and the service methods over them, without a
// network: uploads checked piece by piece and by SHA-256, nothing kept from a failed one, blobs
// sent back in pieces, and a graph compiled whole with its weights kept as a blob. Models over
// gRPC are tests/python/test_models.py's and the CLI's (tests/cli).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "blob_store.h"
#include "kiln/digest.h"
#include "kiln/frontend.h"
#include "kiln/graph.h"
#include "kiln/v1/service.pb.h"
#include "programs.h"
#include "request.h"
#include "scratch_dir.h"
#include "service.h"

namespace kiln::testing {
namespace {

namespace fs = std::filesystem;

using TempDir = ScratchDir;

// The status a call to `f` refuses with (Ok when it does not).
template <typename F>
server::Status refusal(F f) {
  try {
    f();
  } catch (const server::Refusal& r) {
    return r.status;
  }
  return {};
}

TEST(BlobStore, KeepsBytesUnderTheirSha256) {
  TempDir dir;
  server::BlobStore store(dir.path() + "/blobs", 1 << 20);
  std::string sha = store.put("hello, blob");
  EXPECT_EQ(sha, sha256_hex("hello, blob"));
  EXPECT_TRUE(store.has(sha));
  EXPECT_EQ(store.size(sha), 11u);
  std::ifstream in(store.path(sha, "x"));
  std::string back((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(back, "hello, blob");
  EXPECT_EQ(store.put("hello, blob"), sha);  // again: nothing new
}

TEST(BlobStore, RefusesWhatIsNotABlobOrNotHere) {
  TempDir dir;
  server::BlobStore store(dir.path(), 100);
  server::Status s = refusal([&] { store.path("abc", "op.model.sha256"); });
  EXPECT_EQ(s.code, server::Code::InvalidArgument);
  EXPECT_NE(s.message.find("op.model.sha256: 'abc' is not a SHA-256"), std::string::npos)
      << s.message;
  s = refusal([&] { store.path(std::string(64, 'a'), "op.model.sha256"); });
  EXPECT_EQ(s.code, server::Code::NotFound);
  EXPECT_NE(s.message.find("upload it first"), std::string::npos) << s.message;
  EXPECT_FALSE(store.has("../../etc/passwd"));
  s = refusal([&] { store.begin(std::string(64, 'b'), 101); });
  EXPECT_EQ(s.code, server::Code::ResourceExhausted);
  EXPECT_NE(s.message.find("past this kilnd's limit"), std::string::npos) << s.message;
}

TEST(BlobStore, AFailedOrAbandonedUploadLeavesNothing) {
  TempDir dir;
  server::BlobStore store(dir.path(), 1 << 20);
  std::string sha = sha256_hex("abcdef");
  {
    server::BlobStore::Upload u = store.begin(sha, 6);
    u.write("abc");
    server::Status s = refusal([&] { u.write("defg"); });
    EXPECT_NE(s.message.find("more bytes than the 6 announced"), std::string::npos) << s.message;
  }
  {
    server::BlobStore::Upload u = store.begin(sha, 6);
    u.write("abcdeX");
    server::Status s = refusal([&] { u.finish(); });
    EXPECT_NE(s.message.find("the bytes that arrived have the SHA-256 " + sha256_hex("abcdeX")),
              std::string::npos)
        << s.message;
  }
  {
    server::BlobStore::Upload u = store.begin(sha, 6);
    u.write("abc");  // and then the client goes away
  }
  EXPECT_FALSE(store.has(sha));
  EXPECT_TRUE(fs::is_empty(dir.path()));
  // A crash mid-upload leaves a temporary file: the owner's start removes it.
  std::ofstream(dir.path() + "/.upload-left") << "partial";
  store.remove_unfinished();
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

std::vector<v1::BlobChunk> pieces_of(const std::string& bytes, size_t piece) {
  std::vector<v1::BlobChunk> out;
  for (size_t at = 0; at == 0 || at < bytes.size(); at += piece) {
    v1::BlobChunk c;
    if (at == 0) {
      c.set_sha256(sha256_hex(bytes));
      c.set_size(bytes.size());
    }
    c.set_offset(at);
    c.set_data(bytes.substr(at, piece));
    out.push_back(c);
  }
  return out;
}

server::Status put(server::Service& service, const std::vector<v1::BlobChunk>& pieces,
                   v1::PutBlobResponse* response) {
  size_t next = 0;
  return service.put_blob(
      [&](v1::BlobChunk& c) {
        if (next == pieces.size()) return false;
        c = pieces[next++];
        return true;
      },
      response);
}

TEST(ServiceBlobs, UploadedInPiecesStatedAndSentBack) {
  server::Service service;
  std::string bytes(5 * 1024 * 1024 / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<char>(i * 131 % 251);
  std::string sha = sha256_hex(bytes);

  v1::StatBlobsRequest stat;
  stat.add_sha256(sha);
  v1::StatBlobsResponse before;
  ASSERT_TRUE(service.stat_blobs(stat, &before).ok());
  EXPECT_FALSE(before.blobs(0).present());

  v1::PutBlobResponse put_response;
  server::Status s = put(service, pieces_of(bytes, 1 << 20), &put_response);
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(put_response.sha256(), sha);
  EXPECT_EQ(put_response.size(), bytes.size());
  EXPECT_FALSE(put_response.already_present());

  v1::StatBlobsResponse after;
  ASSERT_TRUE(service.stat_blobs(stat, &after).ok());
  EXPECT_TRUE(after.blobs(0).present());
  EXPECT_EQ(after.blobs(0).size(), bytes.size());

  ASSERT_TRUE(put(service, pieces_of(bytes, 1 << 20), &put_response).ok());
  EXPECT_TRUE(put_response.already_present());

  std::string back;
  int messages = 0;
  v1::GetBlobRequest get;
  get.set_sha256(sha);
  s = service.get_blob(get, [&](const v1::BlobChunk& c) {
    EXPECT_EQ(c.offset(), back.size());
    EXPECT_LE(c.data().size(), server::kMaxBlobPiece);
    back += c.data();
    ++messages;
    return true;
  });
  ASSERT_TRUE(s.ok()) << s.message;
  EXPECT_EQ(back, bytes);
  EXPECT_EQ(messages, 3);

  stat.add_sha256("not a hash");
  v1::StatBlobsResponse bad;
  s = service.stat_blobs(stat, &bad);
  EXPECT_EQ(s.code, server::Code::InvalidArgument);
  EXPECT_NE(s.message.find("sha256[1]"), std::string::npos) << s.message;
}

TEST(ServiceBlobs, PiecesOutOfPlaceOrTooLargeAreRefused) {
  server::Service service;
  std::string bytes(3000, 'x');
  std::vector<v1::BlobChunk> pieces = pieces_of(bytes, 1000);
  pieces[2].set_offset(1000);
  v1::PutBlobResponse r;
  server::Status s = put(service, pieces, &r);
  EXPECT_EQ(s.code, server::Code::InvalidArgument);
  EXPECT_NE(s.message.find("piece 2: at offset 1000, where 2000 bytes have arrived"),
            std::string::npos)
      << s.message;
  std::string big((1 << 20) + 1, 'y');
  s = put(service, pieces_of(big, big.size()), &r);
  EXPECT_EQ(s.code, server::Code::InvalidArgument);
  EXPECT_NE(s.message.find("past the 1048576 a piece may hold"), std::string::npos) << s.message;
  s = put(service, {}, &r);
  EXPECT_NE(s.message.find("no piece arrived"), std::string::npos) << s.message;
}

TEST(ServiceBlobs, AGraphCompilesWholeWithItsWeightsKeptAsABlob) {
  server::Service service;
  v1::CompileRequest request;
  request.mutable_op()->mutable_source()->set_text(read_example("conv_bn_relu"));
  request.mutable_op()->mutable_source()->set_filename("conv_bn_relu.kiln");
  request.mutable_op()->mutable_source()->set_name("block");
  v1::CompileResponse response;
  server::Status s = service.compile(request, &response);
  ASSERT_TRUE(s.ok()) << s.message;
  const v1::Artifact& a = response.artifact();
  EXPECT_EQ(a.kind(), "model");
  EXPECT_EQ(response.model().calls(), 1);
  EXPECT_EQ(response.model().calls_before(), 4);

  ir::Module m = frontend::parse_module(read_example("conv_bn_relu"), "conv_bn_relu.kiln");
  graph::ModelArtifact offline =
      graph::compile_model(m.graphs.at(0), CompileOptions{}, graph::FoldBy::Interpreter);
  EXPECT_EQ(a.code(), std::string(offline.code.begin(), offline.code.end()));
  EXPECT_EQ(a.metadata_json(), offline.metadata_json());
  EXPECT_EQ(a.weights_sha256(), offline.weights_sha256);
  EXPECT_EQ(a.weights_bytes(), offline.weights.size());

  std::string weights;
  v1::GetBlobRequest get;
  get.set_sha256(a.weights_sha256());
  ASSERT_TRUE(service
                  .get_blob(get,
                            [&](const v1::BlobChunk& c) {
                              weights += c.data();
                              return true;
                            })
                  .ok());
  EXPECT_EQ(weights, std::string(offline.weights.begin(), offline.weights.end()));
}

TEST(ServiceBlobs, AModelThatIsNotOneIsAnImportErrorNamingItsFile) {
  server::Service service;
  std::string junk = "this is not an onnx model";
  v1::PutBlobResponse put_response;
  ASSERT_TRUE(put(service, pieces_of(junk, 1 << 20), &put_response).ok());
  v1::CheckRequest request;
  request.mutable_op()->mutable_model()->set_sha256(sha256_hex(junk));
  request.mutable_op()->mutable_model()->set_filename("junk.onnx");
  v1::CheckResponse response;
  server::Status s = service.check(request, &response);
  EXPECT_EQ(s.code, server::Code::InvalidArgument);
  EXPECT_NE(s.message.find("junk.onnx: import error"), std::string::npos) << s.message;
}

}  // namespace
}  // namespace kiln::testing
