#include "dsa/server/http_server.h"

#include <fmt/format.h>
#include <httplib.h>

#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "dsa/core/log.h"
#include "dsa/server/openai_request.h"
#include "dsa/server/openai_response.h"

namespace dsa::server {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr const char* kJson = "application/json";
// A stream with nothing to say for this long writes an SSE comment: a client that went away while
// its request waits in the queue is noticed (the write fails) and the request aborted.
constexpr auto kStreamHeartbeat = std::chrono::seconds(2);
constexpr auto kEventPoll = std::chrono::milliseconds(100);

int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

uint64_t random_seed() {
  thread_local std::mt19937_64 gen{std::random_device{}()};
  return gen();
}

void send_error(httplib::Response& res, const ApiError& e) {
  res.status = e.http_status;
  res.set_content(dump(error_json(e)), kJson);
}

std::string_view reason_phrase(int status) {
  switch (status) {
    case 400:
      return "bad request";
    case 404:
      return "not found";
    case 405:
      return "method not allowed";
    case 408:
      return "request timeout";
    case 413:
      return "request body too large";
    case 414:
      return "request URI too long";
    case 416:
      return "range not satisfiable";
    default:
      return status >= 500 ? "server error" : "request refused";
  }
}

// The engine's verdict on a request that finished with kError, as an HTTP error.
ApiError engine_error(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
      return bad_request("", s.message());
    case StatusCode::kResourceExhausted:  // can never fit this server's KV cache
      return ApiError{400, s.message(), "invalid_request_error", "", "kv_cache_exceeded"};
    case StatusCode::kOk:
    case StatusCode::kFailedPrecondition:
    case StatusCode::kInternal:
    case StatusCode::kNotFound:
    case StatusCode::kUnimplemented:
      break;
  }
  return ApiError{500, s.to_string(), "server_error", "", ""};
}

ApiError aborted_error() {
  return ApiError{503, "the request was aborted (the server is shutting down)", "server_error", "",
                  "aborted"};
}

// One stream's state, shared by the content provider and its releaser.
struct Stream {
  std::shared_ptr<RequestChannel> channel;
  ResponseMeta meta;
  bool include_usage = false;
  bool started = false;
  bool done = false;
  Clock::time_point last_write = Clock::now();
};

}  // namespace

class HttpServer::Impl {
 public:
  Impl(HttpOptions o, ServerMetrics* m) : options_(std::move(o)), metrics_(m) {
    const size_t threads = size_t(std::max(1, options_.threads));
    svr_.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
    svr_.set_payload_max_length(options_.max_request_bytes);
    svr_.set_read_timeout(options_.read_timeout_s, 0);
    svr_.set_write_timeout(options_.write_timeout_s, 0);
    svr_.set_keep_alive_timeout(5);
    svr_.set_tcp_nodelay(true);  // stream chunks are small and should leave at once
    // SO_REUSEADDR only: httplib's default adds SO_REUSEPORT, with which a second server on the
    // same port binds too and the kernel splits the connections between the two.
    svr_.set_socket_options([](socket_t sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    });
    svr_.Post("/v1/completions", [this](const httplib::Request& q, httplib::Response& r) {
      completion(q, r, Endpoint::kCompletions);
    });
    svr_.Post("/v1/chat/completions", [this](const httplib::Request& q, httplib::Response& r) {
      completion(q, r, Endpoint::kChat);
    });
    svr_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& r) { models(r); });
    svr_.Get("/health", [this](const httplib::Request&, httplib::Response& r) { health(r); });
    svr_.Get("/metrics", [this](const httplib::Request&, httplib::Response& r) {
      r.set_content(metrics_ ? metrics_->serialize() : std::string(),
                    "text/plain; version=0.0.4; charset=utf-8");
    });
    // Errors httplib answers itself (unknown route, body too large, a malformed request line)
    // get the OpenAI error body too; the routes' own errors already have one.
    svr_.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& q, httplib::Response& r) {
          if (!r.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          ApiError e{r.status, fmt::format("{} {}: {}", q.method, q.path, reason_phrase(r.status)),
                     r.status >= 500 ? "server_error" : "invalid_request_error", "", ""};
          if (r.status == 413) {
            // httplib caps form-encoded bodies at 8 KiB whatever the limit (curl -d sends that type
            // unless told otherwise).
            const bool form =
                q.get_header_value("Content-Type").starts_with("application/x-www-form-urlencoded");
            e.message = form ? "a body sent as application/x-www-form-urlencoded may hold at most "
                               "8192 bytes: send it as Content-Type: application/json"
                             : fmt::format(
                                   "the request body is larger than the limit of {} bytes "
                                   "(--max-request-bytes)",
                                   options_.max_request_bytes);
            e.code = "request_too_large";
            if (metrics_) metrics_->request_rejected("too_large");
          } else if (r.status == 404) {
            e.type = "not_found_error";
          }
          send_error(r, e);
          return httplib::Server::HandlerResponse::Handled;
        }));
    svr_.set_exception_handler(
        [](const httplib::Request& q, httplib::Response& r, std::exception_ptr ep) {
          std::string what = "unknown exception";
          try {
            std::rethrow_exception(ep);
          } catch (const std::exception& e) {
            what = e.what();
          } catch (...) {
          }
          DSA_LOG_ERROR("{} {}: internal error: {}", q.method, q.path, what);
          send_error(r, ApiError{500, "internal error: " + what, "server_error", "", ""});
        });
  }

  StatusOr<int> bind() {
    if (options_.port == 0) {
      const int port = svr_.bind_to_any_port(options_.host);
      if (port < 0) {
        return invalid_argument(fmt::format("--host {}: cannot listen there", options_.host));
      }
      return port;
    }
    if (!svr_.bind_to_port(options_.host, options_.port)) {
      return invalid_argument(fmt::format(
          "--host {} --port {}: cannot listen there (address in use, or not this machine's)",
          options_.host, options_.port));
    }
    return options_.port;
  }

  void start() {
    thread_ = std::thread([this] { svr_.listen_after_bind(); });
  }
  void stop() { svr_.stop(); }
  void join() {
    if (thread_.joinable()) thread_.join();
  }

  std::atomic<const ServingContext*> ready{nullptr};
  std::atomic<bool> draining{false};
  std::atomic<int64_t> busy{0};

 private:
  // Counts a handler in progress, for the shutdown's flush.
  struct Busy {
    explicit Busy(std::atomic<int64_t>& n) : n_(n) { ++n_; }
    ~Busy() { --n_; }
    std::atomic<int64_t>& n_;
  };

  void reject(httplib::Response& res, const ApiError& e, std::string_view reason) {
    if (metrics_) metrics_->request_rejected(reason);
    send_error(res, e);
  }

  // The serving context, or a 503 (loading, draining) already written.
  const ServingContext* serving(httplib::Response& res) {
    if (draining.load()) {
      reject(res, ApiError{503, "the server is shutting down", "server_error", "", "shutting_down"},
             "unavailable");
      return nullptr;
    }
    const ServingContext* ctx = ready.load(std::memory_order_acquire);
    if (ctx == nullptr) {
      reject(res,
             ApiError{503, "the model is loading; retry when GET /health answers 200",
                      "server_error", "", "model_loading"},
             "unavailable");
    }
    return ctx;
  }

  void health(httplib::Response& res) {
    const ServingContext* ctx = ready.load(std::memory_order_acquire);
    std::string_view state = draining.load()       ? "shutting_down"
                             : ctx == nullptr      ? "loading"
                             : ctx->loop->failed() ? "failed"
                                                   : "ok";
    res.status = state == "ok" ? 200 : 503;
    res.set_content(dump(json{{"status", state}}), kJson);
  }

  void models(httplib::Response& res) {
    const ServingContext* ctx = serving(res);
    if (ctx == nullptr) return;
    res.set_content(dump(models_json(ctx->model_name, ctx->created)), kJson);
  }

  void completion(const httplib::Request& req, httplib::Response& res, Endpoint endpoint) {
    Busy b(busy);
    // A request refused here never reaches the engine (whose log line covers the others): it
    // gets its line on the way out.
    struct LogRefusal {
      const httplib::Request& req;
      httplib::Response& res;
      ~LogRefusal() {
        if (res.status >= 400) {
          DSA_LOG_INFO("{} {} from {}: {} {}", req.method, req.path, req.remote_addr, res.status,
                       res.body.substr(0, 300));
        }
      }
    } log_refusal{req, res};
    const ServingContext* ctx = serving(res);
    if (ctx == nullptr) return;
    ApiResult<OpenAiRequest> parsed =
        parse_request(endpoint, req.body, ctx->vocab_size, ctx->context_length);
    if (auto* e = std::get_if<ApiError>(&parsed)) return reject(res, *e, "invalid");
    const OpenAiRequest& r = std::get<OpenAiRequest>(parsed);
    PrepareContext pc;
    pc.tokenizer = ctx->tokenizer;
    pc.chat = &ctx->chat;
    pc.context_length = ctx->context_length;
    pc.default_seed = random_seed();
    ApiResult<engine::GenerationRequest> gen = prepare(r, pc);
    if (auto* e = std::get_if<ApiError>(&gen)) return reject(res, *e, "invalid");
    ResponseMeta meta{endpoint, new_response_id(endpoint), unix_now(), ctx->model_name};
    StatusOr<std::shared_ptr<RequestChannel>> channel =
        ctx->loop->submit(std::move(std::get<engine::GenerationRequest>(gen)), r.stream, meta.id);
    if (!channel.ok()) {
      if (channel.status().code() == StatusCode::kResourceExhausted) {
        res.set_header("Retry-After", "1");
        return reject(
            res, ApiError{429, channel.status().message(), "rate_limit_error", "", "queue_full"},
            "queue_full");
      }
      return reject(res,
                    ApiError{503, channel.status().message(), "server_error", "", "unavailable"},
                    "unavailable");
    }
    if (r.stream) {
      stream(res, *channel, std::move(meta), r.include_usage);
    } else {
      whole(res, **channel, meta);
    }
  }

  // A non-streamed answer: wait for the finish.
  void whole(httplib::Response& res, RequestChannel& channel, const ResponseMeta& meta) {
    while (true) {
      for (RequestEvent& e : channel.wait(std::chrono::seconds(1))) {
        if (e.kind != RequestEvent::Kind::kFinished) continue;
        if (e.finish == engine::FinishReason::kError) return send_error(res, engine_error(e.error));
        if (e.finish == engine::FinishReason::kAborted) return send_error(res, aborted_error());
        res.set_content(dump(completion_json(meta, e.full_text, e.finish,
                                             {e.prompt_tokens, e.completion_tokens})),
                        kJson);
        return;
      }
    }
  }

  void stream(httplib::Response& res, std::shared_ptr<RequestChannel> channel, ResponseMeta meta,
              bool include_usage) {
    auto st = std::make_shared<Stream>();
    st->channel = std::move(channel);
    st->meta = std::move(meta);
    st->include_usage = include_usage;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // proxies must not hold the events back
    // The stream counts as busy from here until httplib releases it (written out or cut): the
    // shutdown waits for it to write its last event.
    ++busy;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st](size_t, httplib::DataSink& sink) {
          try {
            return write_events(*st, sink);
          } catch (const std::exception& e) {  // httplib does not catch around providers
            DSA_LOG_ERROR("{}: stream: {}", st->meta.id, e.what());
            return false;
          }
        },
        // Not done: the connection ended first (the client went away, a write failed or timed
        // out, the server stopped). The engine aborts the request at its next step.
        [this, st](bool) {
          if (!st->done) st->channel->cancel();
          --busy;
        });
  }

  // Writes what the request has to say now; false when the client is gone.
  bool write_events(Stream& st, httplib::DataSink& sink) {
    auto write = [&](const std::string& s) {
      st.last_write = Clock::now();
      return sink.write(s.data(), s.size());
    };
    const bool chat = st.meta.endpoint == Endpoint::kChat;
    if (!st.started) {
      st.started = true;
      // Chat streams open with the assistant's role (OpenAI's first chunk).
      if (chat && !write(sse_event(chunk_json(st.meta, "", true, std::nullopt, st.include_usage))))
        return false;
    }
    std::vector<RequestEvent> events = st.channel->wait(kEventPoll);
    if (events.empty()) {
      if (Clock::now() - st.last_write >= kStreamHeartbeat) return write(": keep-alive\n\n");
      return true;
    }
    for (const RequestEvent& e : events) {
      if (!e.text.empty() &&
          !write(sse_event(chunk_json(st.meta, e.text, false, std::nullopt, st.include_usage)))) {
        return false;
      }
      if (e.kind != RequestEvent::Kind::kFinished) continue;
      st.done = true;
      if (e.finish == engine::FinishReason::kError) {
        // Past the headers an HTTP status cannot change: the error is an event, as OpenAI does.
        if (!write(sse_event(error_json(engine_error(e.error))))) return false;
      } else {
        const std::optional<std::string_view> no_text =
            chat ? std::nullopt : std::optional<std::string_view>("");
        if (!write(sse_event(chunk_json(st.meta, no_text, false, e.finish, st.include_usage))))
          return false;
        if (st.include_usage &&
            !write(sse_event(usage_chunk_json(st.meta, {e.prompt_tokens, e.completion_tokens})))) {
          return false;
        }
      }
      if (!write(std::string(kSseDone))) return false;
      sink.done();
      return true;
    }
    return true;
  }

  HttpOptions options_;
  ServerMetrics* metrics_;
  httplib::Server svr_;
  std::thread thread_;
};

HttpServer::HttpServer(HttpOptions options, ServerMetrics* metrics)
    : impl_(std::make_unique<Impl>(std::move(options), metrics)) {}

HttpServer::~HttpServer() {
  stop();
  join();
}

StatusOr<int> HttpServer::bind() { return impl_->bind(); }
void HttpServer::start() { impl_->start(); }
void HttpServer::set_ready(const ServingContext* context) {
  impl_->ready.store(context, std::memory_order_release);
}
void HttpServer::set_draining() { impl_->draining.store(true); }
int64_t HttpServer::busy() const { return impl_->busy.load(); }
void HttpServer::stop() { impl_->stop(); }
void HttpServer::join() { impl_->join(); }

}  // namespace dsa::server
