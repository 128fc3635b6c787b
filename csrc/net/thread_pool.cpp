#include "thread_pool.h"

#include <atomic>
#include <exception>

namespace lenet {

struct ThreadPool::Job {
    const std::function<void(int)>* fn;
    int n;
    std::atomic<int> next{0};
    std::mutex mutex;
    std::condition_variable finished;
    int done = 0;
    std::exception_ptr error;
};

ThreadPool::ThreadPool(int workers) {
    for (int i = 0; i < workers; ++i) threads_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stopping_ = true;
    }
    wake_.notify_all();
    for (auto& t : threads_) t.join();
}

void ThreadPool::work_on(Job& job) {
    for (int i; (i = job.next.fetch_add(1)) < job.n;) {
        std::exception_ptr error;
        try {
            (*job.fn)(i);
        } catch (...) {
            error = std::current_exception();
        }
        std::lock_guard<std::mutex> lock(job.mutex);
        if (error && !job.error) job.error = error;
        if (++job.done == job.n) job.finished.notify_all();
    }
}

void ThreadPool::worker_loop() {
    for (;;) {
        std::shared_ptr<Job> job;
        {
            std::unique_lock<std::mutex> lock(mutex_);
            wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
            if (stopping_) return;
            job = queue_.front();
            // Every index handed out: nobody else needs to find this job.
            if (job->next.load() >= job->n - 1) queue_.pop_front();
        }
        work_on(*job);
    }
}

void ThreadPool::parallel_for(int n, const std::function<void(int)>& fn) {
    if (n <= 0) return;
    auto job = std::make_shared<Job>();
    job->fn = &fn;
    job->n = n;
    if (n > 1 && !threads_.empty()) {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            queue_.push_back(job);
        }
        if (n == 2)
            wake_.notify_one();
        else
            wake_.notify_all();
    }
    work_on(*job);
    {
        std::unique_lock<std::mutex> lock(job->mutex);
        job->finished.wait(lock, [&] { return job->done == job->n; });
    }
    if (n > 1 && !threads_.empty()) {
        // Remove the job if no worker got to pop it.
        std::lock_guard<std::mutex> lock(mutex_);
        for (auto it = queue_.begin(); it != queue_.end(); ++it)
            if (*it == job) {
                queue_.erase(it);
                break;
            }
    }
    if (job->error) std::rethrow_exception(job->error);
}

}  // namespace lenet
