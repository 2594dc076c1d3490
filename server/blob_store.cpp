// Content-addressed blobs on disk (blob_store.h).
#include "blob_store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "kiln/digest.h"
#include "request.h"
#include "validate.h"

namespace fs = std::filesystem;

namespace kiln::server {
namespace {

Sha256* hasher(void* p) { return static_cast<Sha256*>(p); }

std::string mb(uint64_t bytes) { return fmt::format("{:.1f} MiB", bytes / (1024.0 * 1024.0)); }

}  // namespace

bool is_sha256(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

BlobStore::BlobStore(std::string dir, uint64_t max_bytes)
    : dir_(std::move(dir)), max_bytes_(max_bytes) {
  std::error_code ec;
  fs::create_directories(dir_, ec);
  if (ec || !fs::is_directory(dir_))
    throw std::runtime_error(fmt::format("cannot make the blob folder {}: {}", dir_, ec.message()));
}

void BlobStore::remove_unfinished() {
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir_, ec)) {
    if (e.path().filename().string().starts_with(".upload-")) fs::remove(e.path(), ec);
  }
}

bool BlobStore::here(const std::string& sha256) const {
  std::error_code ec;
  return is_sha256(sha256) && fs::is_regular_file(fs::path(dir_) / sha256, ec);
}

bool BlobStore::has(const std::string& sha256) const {
  if (here(sha256)) return true;
  try {
    return fetch(sha256);
  } catch (const std::exception&) {  // not fetched: as if no replica had it
    return false;
  }
}

bool BlobStore::fetch(const std::string& sha256) const {
  if (share_ == nullptr || !is_sha256(sha256)) return false;
  std::optional<uint64_t> size = share_->size(sha256);
  if (!size) return false;
  // Written as an upload is: checked against its SHA-256, visible only once whole.
  Upload u(const_cast<BlobStore&>(*this), sha256, *size);
  u.publish_ = false;
  share_->fetch(sha256, [&](std::string_view piece) { u.write(piece); });
  u.finish();
  return true;
}

uint64_t BlobStore::size(const std::string& sha256) const {
  std::error_code ec;
  if (!here(sha256)) return 0;
  uintmax_t n = fs::file_size(fs::path(dir_) / sha256, ec);
  return ec ? 0 : n;
}

std::string BlobStore::path(const std::string& sha256, std::string_view what) const {
  if (!is_sha256(sha256))
    refuse(Code::InvalidArgument, fmt::format("{}: {} is not a SHA-256 (64 lowercase hex digits)",
                                              what, server::quoted(sha256)));
  if (!has(sha256))
    refuse(Code::NotFound, fmt::format("{}: kilnd has no blob {}: upload it first (PutBlob; the "
                                       "CLI and the Python client do so by themselves)",
                                       what, sha256));
  return (fs::path(dir_) / sha256).string();
}

std::string BlobStore::put(std::string_view bytes) {
  std::string sha = sha256_hex(bytes);
  if (here(sha)) return sha;
  Upload u = begin(sha, bytes.size());
  u.write(bytes);
  u.finish();
  return sha;
}

BlobStore::Upload BlobStore::begin(const std::string& sha256, uint64_t size) {
  if (!is_sha256(sha256))
    refuse(Code::InvalidArgument,
           fmt::format("sha256: {} is not a SHA-256 (64 lowercase hex digits)",
                       server::quoted(sha256)));
  if (size > max_bytes_)
    refuse(Code::ResourceExhausted,
           fmt::format("size: a blob of {} is past this kilnd's limit of {} (--max-blob-mb)",
                       mb(size), mb(max_bytes_)));
  return Upload(*this, sha256, size);
}

BlobStore::Upload::Upload(BlobStore& store, std::string sha256, uint64_t size)
    : store_(&store), sha256_(std::move(sha256)), size_(size), hash_(new Sha256()) {
  if (store.here(sha256_)) return;  // read and dropped
  temp_ = (fs::path(store.dir_) / ".upload-XXXXXX").string();
  fd_ = mkstemp(temp_.data());
  if (fd_ < 0) {
    int err = errno;
    delete hasher(hash_);
    hash_ = nullptr;
    refuse(Code::Internal,
           fmt::format("cannot make a file in {}: {}", store.dir_, std::strerror(err)));
  }
}

BlobStore::Upload::Upload(Upload&& o) noexcept
    : store_(o.store_),
      publish_(o.publish_),
      sha256_(std::move(o.sha256_)),
      temp_(std::move(o.temp_)),
      size_(o.size_),
      received_(o.received_),
      fd_(o.fd_),
      hash_(o.hash_) {
  o.fd_ = -1;
  o.hash_ = nullptr;
  o.temp_.clear();
}

BlobStore::Upload::~Upload() {
  if (fd_ >= 0) close(fd_);
  if (!temp_.empty()) unlink(temp_.c_str());
  delete hasher(hash_);
}

void BlobStore::Upload::write(std::string_view piece) {
  if (piece.size() > size_ - received_)
    refuse(Code::InvalidArgument,
           fmt::format("blob {}: more bytes than the {} announced", sha256_, size_));
  received_ += piece.size();
  hasher(hash_)->add_raw(piece);
  for (size_t done = 0; fd_ >= 0 && done < piece.size();) {
    ssize_t n = ::write(fd_, piece.data() + done, piece.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      refuse(Code::Internal, fmt::format("cannot write blob {} in {}: {}", sha256_, store_->dir_,
                                         std::strerror(errno)));
    done += static_cast<size_t>(n);
  }
}

void BlobStore::Upload::finish() {
  if (received_ != size_)
    refuse(Code::InvalidArgument,
           fmt::format("blob {}: {} bytes arrived of the {} announced", sha256_, received_, size_));
  std::string got = hasher(hash_)->hex();
  if (got != sha256_)
    refuse(Code::InvalidArgument,
           fmt::format("blob {}: the bytes that arrived have the SHA-256 {}", sha256_, got));
  if (fd_ < 0) return;  // it was here already
  if (fsync(fd_) != 0 || close(fd_) != 0) {
    fd_ = -1;
    refuse(Code::Internal, fmt::format("cannot write blob {} in {}: {}", sha256_, store_->dir_,
                                       std::strerror(errno)));
  }
  fd_ = -1;
  std::error_code ec;
  fs::path kept = fs::path(store_->dir_) / sha256_;
  fs::rename(temp_, kept, ec);
  if (ec)
    refuse(Code::Internal,
           fmt::format("cannot keep blob {} in {}: {}", sha256_, store_->dir_, ec.message()));
  temp_.clear();
  if (publish_ && store_->share_) {
    try {
      store_->share_->publish(sha256_, kept.string(), size_);
    } catch (const std::exception& e) {
      refuse(Code::Unavailable,
             fmt::format("blob {} is kept by this kilnd but not shared with the other replicas "
                         "(upload it again): {}",
                         sha256_, e.what()));
    }
  }
}

}  // namespace kiln::server
