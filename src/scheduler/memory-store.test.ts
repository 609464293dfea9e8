import { MemoryStore } from './memory-store.js';
import { runSchedulerStoreContract } from './store.contract.js';

runSchedulerStoreContract('MemoryStore', () => ({ store: new MemoryStore() }));
