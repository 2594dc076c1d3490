// SHA-256 through OpenSSL's EVP interface.
#include "kiln/digest.h"

#include <openssl/evp.h>

#include <cstdint>
#include <stdexcept>

namespace kiln {
namespace {

std::string to_hex(const unsigned char* bytes, unsigned int n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(2 * n);
  for (unsigned int i = 0; i < n; ++i) {
    out += kDigits[bytes[i] >> 4];
    out += kDigits[bytes[i] & 15];
  }
  return out;
}

EVP_MD_CTX* md(void* p) { return static_cast<EVP_MD_CTX*>(p); }

}  // namespace

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &n, EVP_sha256(), nullptr) != 1) {
    throw std::runtime_error("SHA-256 failed in libcrypto");
  }
  return to_hex(digest, n);
}

Sha256::Sha256() : ctx_(EVP_MD_CTX_new()) {
  if (ctx_ == nullptr || EVP_DigestInit_ex(md(ctx_), EVP_sha256(), nullptr) != 1) {
    EVP_MD_CTX_free(md(ctx_));
    throw std::runtime_error("SHA-256 could not start in libcrypto");
  }
}

Sha256::~Sha256() { EVP_MD_CTX_free(md(ctx_)); }

Sha256& Sha256::add(std::string_view field) {
  // The length first, as 8 little-endian bytes: fields cannot run into each other.
  unsigned char len[8];
  uint64_t n = field.size();
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>(n >> (8 * i));
  if (EVP_DigestUpdate(md(ctx_), len, sizeof len) != 1 ||
      EVP_DigestUpdate(md(ctx_), field.data(), field.size()) != 1) {
    throw std::runtime_error("SHA-256 update failed in libcrypto");
  }
  return *this;
}

Sha256& Sha256::add_raw(std::string_view bytes) {
  if (EVP_DigestUpdate(md(ctx_), bytes.data(), bytes.size()) != 1)
    throw std::runtime_error("SHA-256 update failed in libcrypto");
  return *this;
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  if (EVP_DigestFinal_ex(md(ctx_), digest, &n) != 1) {
    throw std::runtime_error("SHA-256 could not finish in libcrypto");
  }
  return to_hex(digest, n);
}

}  // namespace kiln
