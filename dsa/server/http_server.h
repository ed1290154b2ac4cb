// The HTTP front (cpp-httplib, kept out of this header): the OpenAI routes POST /v1/completions
// and /v1/chat/completions (whole responses or server-sent events), GET /v1/models, /health,
// /metrics. Each connection runs on a pool thread; completions go to the engine thread through
// EngineLoop. The listener starts before the model is loaded: /health answers 503 until
// set_ready(), and again once draining.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "dsa/core/status.h"
#include "dsa/model/chat_template.h"
#include "dsa/model/tokenizer.h"
#include "dsa/server/engine_loop.h"
#include "dsa/server/server_metrics.h"

namespace dsa::server {

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 30000;  // 0: any free port (bind() returns it)
  size_t max_request_bytes = size_t(1) << 20;
  int threads = 64;  // connections served at once (a stream holds one for its whole life)
  // A client that sends or reads nothing for this long is dropped: a slow or stuck client cannot
  // pin a thread forever.
  int read_timeout_s = 30;
  int write_timeout_s = 30;
};

// What the completion routes need once the model is loaded; must outlive the server.
struct ServingContext {
  EngineLoop* loop = nullptr;
  const model::Tokenizer* tokenizer = nullptr;
  model::ChatTemplate chat;
  std::string model_name;
  int64_t context_length = 0;
  int64_t vocab_size = 0;
  int64_t created = 0;  // Unix seconds the model was loaded (GET /v1/models)
};

class HttpServer {
 public:
  HttpServer(HttpOptions options, ServerMetrics* metrics);
  ~HttpServer();  // stops and joins
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port. InvalidArgument naming host and port if it
  // cannot (in use, no such address).
  StatusOr<int> bind();
  // Serves on its own thread.
  void start();
  // The model is loaded: completions are served and /health answers 200.
  void set_ready(const ServingContext* context);
  // Shutting down: new completions get 503, /health 503; running streams go on.
  void set_draining();
  // Handlers (connections with a request in progress) right now.
  int64_t busy() const;
  // Stops listening and ends open connections; join() waits for the listener thread.
  void stop();
  void join();

 private:
  class Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace dsa::server
