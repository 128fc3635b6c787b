#include "thread_pool.h"

#include <atomic>
#include <chrono>
#include <exception>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LENET_PAUSE() _mm_pause()
#else
#define LENET_PAUSE() std::this_thread::yield()
#endif

namespace lenet {
namespace {

// How long a thread polls before it sleeps: a worker after its last job, a caller
// waiting for the workers' share. A batch-1 call splits a layer or two, microseconds
// apart, and calls follow each other closely; a sleeping thread costs a futex
// wake-up and a trip through the scheduler (tens of microseconds on a VM) instead.
constexpr auto kPoll = std::chrono::microseconds(100);

template <class Ready>
bool poll(Ready ready) {
    const auto until = std::chrono::steady_clock::now() + kPoll;
    for (int i = 1;; ++i) {
        if (ready()) return true;
        LENET_PAUSE();
        if (i % 64 == 0 && std::chrono::steady_clock::now() > until) return false;
    }
}

}  // namespace

struct ThreadPool::Job {
    const std::function<void(int)>* fn;
    int n;
    std::atomic<int> next{0};
    std::atomic<int> done{0};
    std::mutex mutex;
    std::condition_variable finished;
    std::exception_ptr error;
};

ThreadPool::ThreadPool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
        queued_.fetch_add(1);  // ends the workers' polling
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::work_on(Job& job) {
    for (int i; (i = job.next.fetch_add(1)) < job.n;) {
        {
            std::exception_ptr error;
            try {
                (*job.fn)(i);
            } catch (...) {
                error = std::current_exception();
            }
            if (error) {
                std::lock_guard<std::mutex> lock(job.mutex);
                if (!job.error) job.error = std::move(error);
            }
        }  // this thread's reference to an exception dropped before `done` lets the caller go on
        if (job.done.fetch_add(1) + 1 == job.n) {
            std::lock_guard<std::mutex> lock(job.mutex);  // a waiter checks `done` under it
            job.finished.notify_all();
        }
    }
}

void ThreadPool::worker_loop() {
    for (;;) {
        poll([this] { return queued_.load(std::memory_order_acquire) > 0; });
        std::shared_ptr<Job> job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            ++sleepers_;
            wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
            --sleepers_;
            if (stopping_) return;
            job = queue_.front();
            // Every index handed out: nobody else needs to find this job.
            if (job->next.load() >= job->n - 1) {
                queue_.pop_front();
                queued_.fetch_sub(1);
            }
        }
        work_on(*job);
    }
}

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
    if (n <= 0) return;
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->n = n;
    const bool shared = n > 1 && !threads_.empty();
    if (shared) {
        bool sleeping;
        {
            std::lock_guard<std::mutex> lock(mutex_);
            queue_.push_back(job);
            queued_.fetch_add(1, std::memory_order_release);
            sleeping = sleepers_ > 0;
        }
        // Polling workers see `queued_`; only sleeping ones need a wake-up.
        if (sleeping) {
            if (n == 2)
                wake_.notify_one();
            else
                wake_.notify_all();
        }
    }
    work_on(*job);
    if (!poll([&] { return job->done.load(std::memory_order_acquire) == job->n; })) {
        std::unique_lock<std::mutex> lock(job->mutex);
        job->finished.wait(lock, [&] { return job->done.load() == job->n; });
    }
    if (shared) {
        // Remove the job if no worker got to pop it.
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto it = queue_.begin(); it != queue_.end(); ++it)
            if (*it == job) {
                queue_.erase(it);
                queued_.fetch_sub(1);
                break;
            }
    }
    // The exception leaves the job here, so that a worker dropping the job last never
    // destroys it while the caller still reads it. (The exception's reference count is
    // atomic, but inside libstdc++, where ThreadSanitizer does not see it: it reported the
    // destructor on a worker racing with the caller's catch.)
    std::exception_ptr error;
    {
        std::lock_guard<std::mutex> lock(job->mutex);
        error = std::move(job->error);
    }
    if (error) std::rethrow_exception(error);
}

}  // namespace lenet
