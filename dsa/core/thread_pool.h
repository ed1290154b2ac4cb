// A small fixed thread pool. CPU references use it to parallelise over rows; every row is computed
// independently with a fixed accumulation order, so results never depend on the thread count
// (SPEC.md §1.2, CPU batch invariance).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dsa {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Calls fn(i) for every i in [0, n), spread over the pool and the calling thread; returns when
  // all calls have finished. Nested calls from inside fn run serially on the caller.
  void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t next_ = 0;
  int active_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

// The process-wide pool (hardware threads, or DSA_NUM_THREADS).
ThreadPool& default_thread_pool();

// parallel_for on the default pool.
void parallel_for(int64_t n, const std::function<void(int64_t)>& fn);

}  // namespace dsa
