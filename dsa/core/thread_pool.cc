#include "dsa/core/thread_pool.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>

namespace dsa {

namespace {
thread_local bool in_pool_job = false;
}

ThreadPool::ThreadPool(int num_threads) {
  for (int i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  in_pool_job = true;
  for (;;) {
    int64_t i;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_ >= job_n_) break;
      i = next_++;
    }
    (*job_)(i);
  }
  in_pool_job = false;
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      ++active_;
    }
    run_chunks();
    {
      std::lock_guard<std::mutex> lock(mu_);
      --active_;
    }
    done_cv_.notify_all();
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  if (n <= 0) return;
  if (workers_.empty() || n == 1 || in_pool_job) {
    for (int64_t i = 0; i < n; ++i) fn(i);
    return;
  }
  static std::mutex submit_mu;  // one job at a time; callers from several threads queue here
  std::lock_guard<std::mutex> submit(submit_mu);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    next_ = 0;
    ++generation_;
  }
  work_cv_.notify_all();
  run_chunks();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return next_ >= job_n_ && active_ == 0; });
  job_ = nullptr;
}

ThreadPool& default_thread_pool() {
  static ThreadPool pool([] {
    const unsigned hw_threads = std::thread::hardware_concurrency();
    const int hw = hw_threads ? static_cast<int>(hw_threads) : 1;
    // More threads than 4x the cores only adds contention; a typo must not start 10^6 threads.
    const int cap = std::max(4 * hw, 16);
    if (const char* env = std::getenv("DSA_NUM_THREADS")) {
      char* end = nullptr;
      const long n = std::strtol(env, &end, 10);
      if (end != env && *end == '\0' && n >= 1 && n <= cap) return static_cast<int>(n);
      spdlog::warn("DSA_NUM_THREADS = '{}': must be an integer in [1, {}]; using {}", env, cap, hw);
    }
    return hw;
  }());
  return pool;
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  default_thread_pool().parallel_for(n, fn);
}

}  // namespace dsa
