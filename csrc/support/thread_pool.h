// A fixed set of worker threads that run parallel_for jobs. Several callers may
// submit jobs at once (one Engine called from several Python threads); the
// calling thread always works on its own job too, so a job never waits for a
// free worker to make progress. Idle workers poll briefly before they sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace lenet {

class ThreadPool {
public:
    explicit ThreadPool(int workers);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    // Calls fn(i) for every i in [0, n) and returns when all calls are done.
    // Rethrows the first exception a call threw.
    void parallel_for(int n, const std::function<void(int)>& fn);
    int workers() const { return int(threads_.size()); }

private:
    struct Job;
    void worker_loop();
    static void work_on(Job& job);

    std::mutex mutex_;
    std::condition_variable wake_;
    std::deque<std::shared_ptr<Job>> queue_;
    std::atomic<int> queued_{0};  // queue_.size(), read without the lock by polling workers
    int sleepers_ = 0;            // workers blocked on wake_ (under mutex_)
    bool stopping_ = false;
    std::vector<std::thread> threads_;
};

}  // namespace lenet
