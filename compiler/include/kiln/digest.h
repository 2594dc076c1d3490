// Content addresses: SHA-256 (OpenSSL's libcrypto), as lowercase hex.
#pragma once

#include <string>
#include <string_view>

namespace kiln {

// The SHA-256 of `bytes`: 64 lowercase hex digits.
std::string sha256_hex(std::string_view bytes);

// Feeds several pieces into one SHA-256, each framed by its length, so that
// ("ab", "c") and ("a", "bc") hash differently.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  Sha256& add(std::string_view field);
  // Feeds bytes with no framing: a stream's pieces, whose hex() is sha256_hex of them all.
  // Not to be mixed with add().
  Sha256& add_raw(std::string_view bytes);
  std::string hex();  // finishes the digest; call once

 private:
  void* ctx_;  // EVP_MD_CTX, kept out of this header
};

}  // namespace kiln
