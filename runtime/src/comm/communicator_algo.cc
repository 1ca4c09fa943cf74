// The communicator's algorithm table (schedule/algo_table.h): swapping it between operations
// and showing it. Apart from communicator.cc so the collectives' code stays about operations.
#include "base/error.h"
#include "comm/communicator_impl.h"

namespace nezha {

void Communicator::setAlgoTable(const std::string& json) {
  Impl& m = *impl_;
  m.engine->checkUsable();
  AlgoTable t = json.empty() ? AlgoTable(m.o.ringThreshold, m.o.chainThreshold)
                             : AlgoTable::parse(json, "algorithm table", m.o.ringThreshold,
                                                m.o.chainThreshold);
  // Between operations no rail thread runs a slice, so the rules can change under no reader.
  m.algoTable = t;
  m.algo = m.algoTable.options();
  m.sched->setAlgoTable(std::move(t));
}

std::string Communicator::algoTableJson() const { return dumpJson(impl_->algoTable.toJson(), 2); }

}  // namespace nezha
