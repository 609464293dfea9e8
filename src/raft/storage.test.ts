import { MemoryStorage } from './storage.js';
import { runLogStorageContract } from './storage.contract.js';

runLogStorageContract('MemoryStorage', (boot) => new MemoryStorage(boot));
