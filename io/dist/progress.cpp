// io/dist/progress.cpp - the progress thread (see progress.hpp).
#include "progress.hpp"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <utility>

#include "ordo/detail/extension.hpp"

namespace ordo::dist::detail {

struct Progress::Command {
  enum Kind { kSend, kAnnounce, kWant, kDiscard, kCollective, kFail } kind = kSend;
  int dest = 0;
  std::vector<std::byte> message;
  Key key;
  Stamp stamp;  // kWant
  Target target;
  OnComplete done;
  const std::function<void(MPI_Comm, MPI_Request*)>* start = nullptr;
  bool* finished = nullptr;  // kCollective: set under mu_ when the request completes
  std::uint64_t slice = 0;   // kSend, kWant: its slice in the trace (0: none)
};

struct Progress::Slot {
  enum Kind { kSend, kRecv, kCollective, kJoined, kShutdown } kind = kSend;
  int source = 0;
  std::vector<std::byte> buffer;  // kSend: kept until matched; kRecv: lands here
  bool* finished = nullptr;       // kCollective
  std::uint64_t slice = 0;        // kSend: its slice in the trace (0: none)
};

Progress::Progress(MPI_Comm comm, Engine& engine, int rank)
    : comm_(comm),
      engine_(engine),
      rank_(rank),
      prof_(ordo::detail::EngineExtension::profiler(engine)),
      track_("rank " + std::to_string(rank)) {
  MPI_Comm_size(comm_, &size_);
  thread_ = std::thread([this] { loop(); });
}

Progress::~Progress() {
  {
    std::lock_guard lock(mu_);
    abandon_ = true;  // after shutdown() succeeded the thread has left already
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Progress::check(int rc, const char* call) const {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  std::fprintf(stderr,
               "ordo::dist: rank %d: %s failed: %.*s (a peer may have died); ending the job with MPI_Abort\n",
               rank_, call, len, text);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

std::uint64_t Progress::profile_begin(const char* what, int peer, std::uint64_t var, std::uint64_t seq,
                                      std::uint64_t bytes) noexcept {
  return ordo::detail::profile_slice_begin(prof_, ordo::detail::SliceCategory::transfer, what, track_.c_str(), bytes,
                                           peer, seq, var);
}

void Progress::send(int dest, std::vector<std::byte> message) {
  std::uint64_t slice = 0;
  if (prof_ != nullptr) [[unlikely]] {
    // Begun here, in the send op's body: the op that launched it. It ends
    // when the receiver has matched it (MPI_Issend).
    Envelope h;
    std::memcpy(&h, message.data(), sizeof h);
    slice = profile_begin("send", dest, h.var_id, h.seq, message.size() - sizeof h);
  }
  {
    std::lock_guard lock(mu_);
    Command c;
    c.kind = Command::kSend;
    c.dest = dest;
    c.message = std::move(message);
    c.slice = slice;
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
}

void Progress::want(const Key& key, Stamp stamp, Target target, OnComplete done) {
  // Begun in the receive op's body; ends when the value is delivered.
  const std::uint64_t slice = prof_ != nullptr ? profile_begin("recv", key.source, key.var_id, key.seq, target.size) : 0;
  {
    std::lock_guard lock(mu_);
    Command c;
    c.kind = Command::kWant;
    c.key = key;
    c.stamp = stamp;
    c.target = target;
    c.done = done;
    c.slice = slice;
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
}

void Progress::discard(const Key& key) {
  {
    std::lock_guard lock(mu_);
    Command c;
    c.kind = Command::kDiscard;
    c.key = key;
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
}

void Progress::fail(std::exception_ptr error) {
  {
    std::lock_guard lock(mu_);
    keep_failure(std::move(error));
    Command c;
    c.kind = Command::kFail;
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
}

void Progress::keep_failure(std::exception_ptr error) noexcept {
  if (failure_ != nullptr) return;
  failure_ = std::move(error);
  failed_.store(true, std::memory_order_release);
}

std::exception_ptr Progress::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

std::uint64_t Progress::lowest_failed() const {
  const std::exception_ptr failure = this->failure();
  if (failure == nullptr) return std::uint64_t(size_);
  try {
    std::rethrow_exception(failure);
  } catch (const DivergedError&) {
  } catch (const RemoteError& e) {
    return std::uint64_t(e.rank());
  } catch (...) {
  }
  return std::uint64_t(size_);
}

std::exception_ptr Progress::wait_failure(std::chrono::milliseconds limit) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, limit, [&] { return failure_ != nullptr; });
  return failure_;
}

void Progress::fail_wants(const std::exception_ptr& error) {
  // The books differ from here on: a receive may wait for a send that no
  // rank will make. Every one fails now, with the first error; new ones at once.
  if (receive_error_ != nullptr) return;
  receive_error_ = error;
  std::map<Key, Wanted> wants;
  wants.swap(wants_);
  for (auto& [key, w] : wants) w.done(error);
  early_.clear();
}

void Progress::mismatch(const Key& key, const Envelope& h, const Stamp& mine, const OnComplete& done) {
  const std::uint64_t first = std::min(h.push, mine.push);
  const std::string what =
      "ordo::dist: rank " + std::to_string(rank_) + ": the ranks pushed different sequences of ops: transfer #" +
      std::to_string(key.seq) + " of variable " + std::to_string(key.var_id) + " from rank " +
      std::to_string(key.source) + " was made by its push #" + std::to_string(h.push) + " and here by push #" +
      std::to_string(mine.push) + (h.push == mine.push ? ", after different pushes" : "") +
      ", so the sequences first differ at or before push #" + std::to_string(first) +
      "; every receive of this rank fails from here on";
  const std::exception_ptr error = std::make_exception_ptr(DivergedError(key.source, first, what));
  done(error);
  fail_wants(error);
}

namespace {
std::vector<std::byte> announcement(std::uint64_t check, const SequenceSummary& books) {
  Envelope h;
  h.seq = check;
  h.push = books.pushes;
  h.hash = books.hash;
  h.status = Envelope::kAnnounce;
  h.size = sizeof books;
  std::vector<std::byte> message(sizeof h + sizeof books);
  std::memcpy(message.data(), &h, sizeof h);
  std::memcpy(message.data() + sizeof h, &books, sizeof books);
  return message;
}
}  // namespace

bool Progress::join_check(std::uint64_t check, const SequenceSummary& mine) {
  std::vector<std::byte> message = announcement(check, mine);
  {
    std::lock_guard lock(mu_);
    if (checks_joined_ >= check) return false;
    checks_joined_ = check;
    Command c;
    c.kind = Command::kAnnounce;
    c.message = std::move(message);
    commands_.push_back(std::move(c));
  }
  cv_.notify_all();
  return true;
}

void Progress::joined_check(Vote& vote, std::vector<SequenceSummary>& all) {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return !joined_.active; });
  vote = joined_.vote;
  all = joined_.all;
}

void Progress::waiting(const Sequence* books) {
  {
    std::lock_guard lock(mu_);
    waiting_ = books;
    news_ = true;
  }
  cv_.notify_all();
}

void Progress::collective(const std::function<void(MPI_Comm, MPI_Request*)>& start) {
  bool finished = false;
  std::unique_lock lock(mu_);
  Command c;
  c.kind = Command::kCollective;
  c.start = &start;
  c.finished = &finished;
  commands_.push_back(std::move(c));
  cv_.notify_all();
  cv_.wait(lock, [&] { return finished; });
}

bool Progress::shutdown(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  shutdown_requested_ = true;
  cv_.notify_all();
  if (timeout.count() == 0) {
    cv_.wait(lock, [&] { return finished_; });
    return true;
  }
  return cv_.wait_for(lock, timeout, [&] { return finished_; });
}

double Progress::cpu_seconds() const noexcept {
  // The thread is joined only in the destructor, so its handle is valid here.
  clockid_t clock{};
  auto handle = const_cast<std::thread&>(thread_).native_handle();
  if (pthread_getcpuclockid(handle, &clock) != 0) return 0;
  timespec ts{};
  if (clock_gettime(clock, &ts) != 0) return 0;
  return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

void Progress::post_send(int dest, std::vector<std::byte> buffer, std::uint64_t slice) {
  Slot s;
  s.kind = Slot::kSend;
  s.buffer = std::move(buffer);
  s.slice = slice;
  MPI_Request r = MPI_REQUEST_NULL;
  // Synchronous mode: complete once the receiver has matched it, so that
  // at shutdown "my sends are done" on every rank means "nothing is on
  // the wire"; the send op itself finished when it handed the message here.
  check(MPI_Issend(s.buffer.data(), static_cast<int>(s.buffer.size()), MPI_BYTE, dest, kDataTag, comm_, &r),
        "MPI_Issend");
  ++sends_in_flight_;
  requests_.push_back(r);
  slots_.push_back(std::move(s));
}

void Progress::run_command(Command& c) {
  switch (c.kind) {
    case Command::kSend: {
      counters_.messages_sent.fetch_add(1, std::memory_order_relaxed);
      counters_.bytes_sent.fetch_add(c.message.size(), std::memory_order_relaxed);
      post_send(c.dest, std::move(c.message), c.slice);
      break;
    }
    case Command::kAnnounce: {
      // Bookkeeping between the ranks, not a transfer: not in the counters.
      announce(c.message);
      break;
    }
    case Command::kWant: {
      if (receive_error_ != nullptr) {
        c.done(receive_error_);
        break;
      }
      auto it = early_.find(c.key);
      if (it != early_.end()) {
        std::vector<std::byte> message = std::move(it->second);
        early_.erase(it);
        Envelope h;
        std::memcpy(&h, message.data(), sizeof h);
        deliver(c.key, h, std::move(message), Wanted{c.stamp, c.target, c.done, c.slice});
      } else {
        wants_.emplace(c.key, Wanted{c.stamp, c.target, c.done, c.slice});
      }
      break;
    }
    case Command::kDiscard: {
      if (early_.erase(c.key) == 0) discarded_.insert(c.key);
      break;
    }
    case Command::kFail:
      fail_wants(failure());
      break;
    case Command::kCollective: {
      if (joined_.active) {
        held_.push_back(std::move(c));
        break;
      }
      Slot s;
      s.kind = Slot::kCollective;
      s.finished = c.finished;
      MPI_Request r = MPI_REQUEST_NULL;
      (*c.start)(comm_, &r);
      requests_.push_back(r);
      slots_.push_back(std::move(s));
      break;
    }
  }
}

void Progress::post_receives() {
  for (;;) {
    int flag = 0;
    MPI_Message msg = MPI_MESSAGE_NULL;
    MPI_Status st;
    check(MPI_Improbe(MPI_ANY_SOURCE, kDataTag, comm_, &flag, &msg, &st), "MPI_Improbe");
    if (flag == 0) return;
    int count = 0;
    check(MPI_Get_count(&st, MPI_BYTE, &count), "MPI_Get_count");
    Slot s;
    s.kind = Slot::kRecv;
    s.source = st.MPI_SOURCE;
    s.buffer.resize(static_cast<std::size_t>(count));
    MPI_Request r = MPI_REQUEST_NULL;
    check(MPI_Imrecv(s.buffer.data(), count, MPI_BYTE, &msg, &r), "MPI_Imrecv");
    requests_.push_back(r);
    slots_.push_back(std::move(s));
  }
}

bool Progress::test_requests() {
  if (requests_.empty()) return false;
  std::vector<int> done(requests_.size());
  int n = 0;
  check(MPI_Testsome(static_cast<int>(requests_.size()), requests_.data(), &n, done.data(), MPI_STATUSES_IGNORE),
        "MPI_Testsome");
  if (n <= 0) return false;  // MPI_UNDEFINED (none active) or nothing finished
  for (int k = 0; k < n; ++k) {
    Slot& s = slots_[static_cast<std::size_t>(done[static_cast<std::size_t>(k)])];
    switch (s.kind) {
      case Slot::kSend:
        --sends_in_flight_;
        if (s.slice != 0) ordo::detail::profile_slice_end(prof_, s.slice, static_cast<std::int64_t>(s.buffer.size()));
        s.buffer = {};
        break;
      case Slot::kRecv:
        arrived(s.source, std::move(s.buffer));
        break;
      case Slot::kCollective: {
        std::lock_guard lock(mu_);
        *s.finished = true;
        cv_.notify_all();
        break;
      }
      case Slot::kShutdown:
        // A peer that was in a collective of its own fails it, and posts a
        // round of its drain when its Dist goes: this rank waits for that one.
        if (shutdown_vote_.unanimous()) {
          shutdown_phase_ = 3;
        } else {
          post_shutdown_round();
        }
        break;
      case Slot::kJoined:
        check_request_done();
        break;
    }
  }
  // Completed requests are MPI_REQUEST_NULL now: compact both arrays.
  std::size_t out = 0;
  for (std::size_t i = 0; i < requests_.size(); ++i) {
    if (requests_[i] == MPI_REQUEST_NULL) continue;
    if (out != i) {
      requests_[out] = requests_[i];
      slots_[out] = std::move(slots_[i]);
    }
    ++out;
  }
  requests_.resize(out);
  slots_.resize(out);
  return true;
}

void Progress::arrived(int source, std::vector<std::byte> message) {
  Envelope h;
  if (message.size() < sizeof h) {
    std::fprintf(stderr, "ordo::dist: rank %d: a %zu-byte message from rank %d is shorter than an envelope; dropped\n",
                 rank_, message.size(), source);
    return;
  }
  std::memcpy(&h, message.data(), sizeof h);
  if (h.status == Envelope::kAnnounce) {
    announced(source, h, message);
    return;
  }
  counters_.messages_received.fetch_add(1, std::memory_order_relaxed);
  counters_.bytes_received.fetch_add(message.size(), std::memory_order_relaxed);
  if (h.status == Envelope::kPushFailed) {
    const auto* text = reinterpret_cast<const char*>(message.data() + sizeof h);
    {
      std::lock_guard lock(mu_);
      keep_failure(std::make_exception_ptr(RemoteError(h.origin, std::string(text, message.size() - sizeof h))));
    }
    cv_.notify_all();
    fail_wants(failure());
    return;
  }
  const Key key{source, h.var_id, h.seq};
  if (discarded_.erase(key) != 0) return;
  if (receive_error_ != nullptr) return;  // no receive will want it: each fails at once (fail_wants)
  auto it = wants_.find(key);
  if (it == wants_.end()) {
    counters_.early_messages.fetch_add(1, std::memory_order_relaxed);
    early_.emplace(key, std::move(message));
    return;
  }
  Wanted w = std::move(it->second);
  wants_.erase(it);
  deliver(key, h, std::move(message), w);
}

void Progress::deliver(const Key& key, const Envelope& h, std::vector<std::byte> message, const Wanted& w) {
  const std::byte* payload = message.data() + sizeof(Envelope);
  const std::size_t size = message.size() - sizeof(Envelope);
  const Target& target = w.target;
  const OnComplete& done = w.done;
  // The same transfer key from a different push: the ranks' sequences
  // differ, and this value (or error) is not the one the books expect.
  const bool same_push = h.push == w.stamp.push && h.hash == w.stamp.hash;
  // The receive op finishes here (or the post that loads a codec's value is
  // pushed here): what the transfer released, an arrow in the trace.
  if (w.slice != 0) {
    ordo::detail::profile_slice_end(prof_, w.slice,
                                    same_push && h.status == Envelope::kOk ? static_cast<std::int64_t>(size) : -1);
  }
  const ordo::detail::ProfileReleaseScope released(prof_, w.slice);
  if (!same_push) {
    mismatch(key, h, w.stamp, done);
    return;
  }
  if (h.status != Envelope::kOk) {
    done(std::make_exception_ptr(
        RemoteError(h.origin, std::string(reinterpret_cast<const char*>(payload), size))));
    return;
  }
  if (target.codec != nullptr) {
    // The user's load is user code: it runs on a worker, which then completes the receive.
    const Codec* codec = target.codec;
    engine_.post([codec, message = std::move(message), done] {
      try {
        codec->load(std::span(message.data() + sizeof(Envelope), message.size() - sizeof(Envelope)));
      } catch (...) {
        done(std::current_exception());
        return;
      }
      done();
    });
    return;
  }
  if (size != target.size) {
    done(std::make_exception_ptr(Error(Errc::invalid_argument,
                                       "ordo::dist: variable " + std::to_string(h.var_id) + " arrived with " +
                                           std::to_string(size) + " bytes where " + std::to_string(target.size) +
                                           " were registered (registrations differ between ranks)")));
    return;
  }
  // A flat buffer: a copy, bookkeeping-sized; the receive op holds the
  // variable for writing, and done() publishes the bytes to its dependants.
  if (size != 0) std::memcpy(target.data, payload, size);
  done();
}

void Progress::announced(int source, const Envelope& h, const std::vector<std::byte>& message) {
  if (message.size() != sizeof h + sizeof(SequenceSummary)) {
    std::fprintf(stderr, "ordo::dist: rank %d: an announcement of %zu bytes from rank %d (not %zu); dropped\n", rank_,
                 message.size(), source, sizeof h + sizeof(SequenceSummary));
    return;
  }
  Heard a;
  a.source = source;
  a.check = h.seq;
  std::memcpy(&a.summary, message.data() + sizeof h, sizeof a.summary);
  heard_.push_back(a);
  std::lock_guard lock(mu_);
  news_ = true;
}

void Progress::announce(const std::vector<std::byte>& message) {
  for (int r = 0; r < size_; ++r) {
    if (r != rank_) post_send(r, message, 0);
  }
}

void Progress::heard() {
  std::exception_ptr error;
  std::uint64_t check = 0;
  {
    std::lock_guard lock(mu_);
    if (!news_) return;  // nothing to compare that was not compared already
    news_ = false;
    // A check this rank has entered compares the books itself.
    std::erase_if(heard_, [&](const Heard& a) { return a.check <= checks_joined_; });
    if (heard_.empty() || waiting_ == nullptr || failure_ != nullptr) return;
    // The pushing thread is blocked in a wait and has not entered the next
    // check: its books stay as they are while mu_ is held.
    SequenceSummary mine;
    mine.pushes = waiting_->pushes;
    mine.hash = waiting_->hash;
    mine.recent = waiting_->recent;
    const auto it = std::find_if(heard_.begin(), heard_.end(),
                                 [&](const Heard& a) { return diverged_before_check(mine, a.summary); });
    if (it == heard_.end()) return;
    // The verdict on the two rings, in the collective check's words (lower rank first).
    const bool first = rank_ < it->source;
    const SequenceSummary pair[2] = {first ? mine : it->summary, first ? it->summary : mine};
    const int names[2] = {std::min(rank_, it->source), std::max(rank_, it->source)};
    // rank(): the peer whose announcement proved it, as a transfer's mismatch names its sender.
    const Divergence dv = diagnose(pair, waiting_->verified, names);
    error = std::make_exception_ptr(DivergedError(it->source, dv.push, dv.what));
    keep_failure(error);
    // Join the check the peer waits in, with these books, as the pushing
    // thread would have: the peers' verdict needs this rank's vote.
    check = checks_joined_ = it->check;
    joined_.active = true;
    joined_.vote = Vote(Vote::kCheck, std::uint64_t(size_), mine.pushes, mine.hash, rank_, size_);
    joined_.mine = mine;
    heard_.clear();
  }
  cv_.notify_all();
  fail_wants(error);
  announce(announcement(check, joined_.mine));
  Slot s;
  s.kind = Slot::kJoined;
  MPI_Request r = MPI_REQUEST_NULL;
  joined_.vote.post(comm_, &r);
  requests_.push_back(r);
  slots_.push_back(std::move(s));
}

void Progress::check_request_done() {
  if (joined_.all.empty() && joined_.vote.gathers(size_)) {
    // The peers exchange their summaries next: so does this rank (the verdict it keeps is its own).
    joined_.all.resize(std::size_t(size_));
    Slot s;
    s.kind = Slot::kJoined;
    MPI_Request r = MPI_REQUEST_NULL;
    Vote::post_gather(joined_.mine, joined_.all.data(), comm_, &r);
    requests_.push_back(r);
    slots_.push_back(std::move(s));
    return;
  }
  {
    std::lock_guard lock(mu_);
    joined_.active = false;
  }
  cv_.notify_all();
  std::vector<Command> held;
  held.swap(held_);
  for (Command& c : held) run_command(c);
}

void Progress::post_shutdown_round() {
  shutdown_vote_ = Vote(Vote::kShutdown, lowest_failed(), 0, 0, rank_, size_);
  Slot s;
  s.kind = Slot::kShutdown;
  MPI_Request r = MPI_REQUEST_NULL;
  shutdown_vote_.post(comm_, &r);
  requests_.push_back(r);
  slots_.push_back(std::move(s));
}

namespace {
// The progress loop's pace: polls in a row (each with a yield) before it
// naps; the first nap while a transfer is expected, doubling to the
// longest; the nap when nothing is expected (a message may still come
// before its receive op starts). docs/dist.md has the measurements.
constexpr unsigned kHotPolls = 50;
constexpr std::chrono::microseconds kFirstNap{5};
constexpr std::chrono::microseconds kMaxNap{100};
constexpr std::chrono::microseconds kIdleNap{200};
}  // namespace

void Progress::loop() {
  const CompletionThread completion_scope;
  std::vector<Command> batch;
  unsigned idle = 0;
  for (;;) {
    bool shutting_down = false;
    {
      std::unique_lock lock(mu_);
      if (commands_.empty() && idle > kHotPolls && !shutdown_requested_) {
        // Nothing came for a while. A message only moves when this thread
        // polls, but polling flat out steals the CPU from the workers of
        // this rank and of its neighbours on the same cores (docs/dist.md),
        // so nap, longer the longer nothing comes; a command wakes it at once.
        const bool expecting = !wants_.empty() || !requests_.empty();
        const auto nap = expecting ? std::min(kMaxNap, kFirstNap * (1u << std::min(idle - kHotPolls, 8u)))
                                   : kIdleNap;
        cv_.wait_for(lock, nap);
      }
      if (abandon_) break;
      batch.swap(commands_);
      shutting_down = shutdown_requested_;
    }
    bool busy = !batch.empty();
    for (Command& c : batch) run_command(c);
    batch.clear();
    post_receives();
    busy |= test_requests();
    if (!heard_.empty()) heard();

    if (shutting_down) {
      // After a check joined on the pushing thread's behalf: the drain's rounds are the last collectives.
      if (shutdown_phase_ == 0 && sends_in_flight_ == 0 && !joined_.active) {
        post_shutdown_round();
        shutdown_phase_ = 2;
      } else if (shutdown_phase_ == 3 && requests_.empty()) {
        // Every rank's sends were matched before its round: every message
        // to this rank is being received; leave once they all landed.
        break;
      }
    }
    if (busy) {
      idle = 0;
    } else {
      ++idle;
      std::this_thread::yield();
    }
  }
  leftovers_.store(early_.size() + wants_.size(), std::memory_order_relaxed);
  std::lock_guard lock(mu_);
  finished_ = true;
  cv_.notify_all();
}

}  // namespace ordo::dist::detail
